;; start-http.wat: a start function that calls Extism's http_request, as a
;; plugin's start function may call any Extism host function. The instance
;; fails to start (there is no Extism plugin yet to serve the call); two of
;; them started at once must not share any state of the host's.
(module
  (import "extism:host/env" "http_request" (func $http (param i64 i64) (result i64)))
  (memory (export "memory") 1)
  (func $start (drop (call $http (i64.const 0) (i64.const 0))))
  (start $start)
  (func (export "handshake") (result i32) (i32.const 1))
  (func (export "canonicalize") (result i32) (i32.const 1))
  (func (export "project") (result i32) (i32.const 1))
)
