;; picky: a well-formed ABI v1 policy plugin ("picky 0.0.1") that accepts
;; the one-object request {"settings":[{}]} alone, the request the daemon's
;; trial calls send, and refuses every other canonicalize request; project
;; shows the snapshot's first tool, untrusted. It is what a buggy plugin that
;; refuses every non-empty settings object looks like (daemon's operator
;; tests). It tells that request by its length: 17 bytes, which the host
;; pads with white space to 24, a multiple of 8 (host/plugin.go, padInput);
;; any other request of 17 to 24 bytes would be accepted too.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "error_set" (func $error_set (param i64)))
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{\"abi\":1,\"name\":\"picky\",\"version\":\"0.0.1\"}\00")
  (data (i32.const 128) "{\"results\":[{\"key\":\"k\"}]}\00")
  (data (i32.const 192) "picky refuses every settings object but {}\00")
  (data (i32.const 256) "{\"tools\":[{\"i\":0,\"trust\":false,\"alwaysLoad\":false}],\"prompts\":[],\"resources\":[]}\00")
  (func $strlen (param $p i32) (result i32)
    (local $n i32)
    (block $done (loop $next
      (br_if $done (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br $next)))
    (local.get $n))
  (func $block (param $p i32) (result i64)
    (local $off i64) (local $i i32) (local $n i32)
    (local.set $n (call $strlen (local.get $p)))
    (local.set $off (call $alloc (i64.extend_i32_u (local.get $n))))
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (call $store_u8 (i64.add (local.get $off) (i64.extend_i32_u (local.get $i)))
        (i32.load8_u (i32.add (local.get $p) (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $next)))
    (local.get $off))
  (func $output (param $p i32)
    (call $output_set (call $block (local.get $p)) (i64.extend_i32_u (call $strlen (local.get $p)))))
  (func (export "handshake") (result i32) (call $output (i32.const 0)) (i32.const 0))
  (func (export "canonicalize") (result i32)
    (if (result i32) (i64.eq (call $input_length) (i64.const 24))
      (then (call $output (i32.const 128)) (i32.const 0))
      (else (call $error_set (call $block (i32.const 192))) (i32.const 1))))
  (func (export "project") (result i32) (call $output (i32.const 256)) (i32.const 0))
)
