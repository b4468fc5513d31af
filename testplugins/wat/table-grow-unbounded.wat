;; table-grow-unbounded.wat: table-grow.wat with a table without a maximum,
;; which would grow to 2^32-1 entries (32 GiB in wazero) and answer (issue
;; 25, reproducer 2): the host refuses it at load.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "error_set" (func $error_set (param i64)))

  (memory (export "memory") 1)
  (data (i32.const 0) "{\"abi\":1,\"name\":\"wat-hostile\",\"version\":\"1.0.0\"}\00")
  (data (i32.const 128) "table-grow-unbounded: not implemented\00")

  (func $strlen (param $p i32) (result i32)
    (local $n i32)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br $next)))
    (local.get $n))

  ;; $block copies the NUL-terminated string at p into a new Extism block.
  (func $block (param $p i32) (result i64)
    (local $off i64) (local $i i32) (local $n i32)
    (local.set $n (call $strlen (local.get $p)))
    (local.set $off (call $alloc (i64.extend_i32_u (local.get $n))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $store_u8 (i64.add (local.get $off) (i64.extend_i32_u (local.get $i)))
          (i32.load8_u (i32.add (local.get $p) (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $off))

  (func $output (param $p i32)
    (call $output_set (call $block (local.get $p))
      (i64.extend_i32_u (call $strlen (local.get $p)))))

  (func $error (param $p i32)
    (call $error_set (call $block (local.get $p))))

  (table $t 0 funcref)
  (func (export "handshake") (result i32)
    (call $output (i32.const 0))
    (i32.const 0))
  (func (export "canonicalize") (result i32)
    (loop $grow
      (br_if $grow (i32.ne (table.grow $t (ref.null func) (i32.const 0x1000000)) (i32.const -1))))
    (call $output (i32.const 0))
    (i32.const 0))
  (func (export "project") (result i32)
    (call $error (i32.const 128))
    (i32.const 1))
)
