;; bulk-fill: a policy plugin whose canonicalize and project fill 64 MiB of
;; memory over and over (each fill a single instruction), and never return.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 1024) ;; 64 MiB
  (data (i32.const 0) "{\22abi\22:1,\22name\22:\22wat-bulk-fill\22,\22version\22:\221.0.0\22}")
  (func (export "handshake") (result i32)
    (local $off i64) (local $i i32)
    (local.set $off (call $alloc (i64.const 50)))
    (loop $next
      (call $store_u8 (i64.add (local.get $off) (i64.extend_i32_u (local.get $i)))
        (i32.load8_u (local.get $i)))
      (br_if $next (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1))) (i32.const 50))))
    (call $output_set (local.get $off) (i64.const 50))
    (i32.const 0))
  (func $spin (export "canonicalize") (export "project") (result i32)
    (loop $fill
      (memory.fill (i32.const 1024) (i32.const 0) (i32.const 67107840))
      (br $fill))
    (unreachable))
)
