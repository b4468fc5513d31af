;; direct.wat: an ABI v1 policy plugin with direct exports (abi/SPEC.md
;; section 5.2) whose direct canonicalize misbehaves on demand. Rebuild with
;; build.sh (wat2wasm direct.wat -o direct.wasm).
;;
;; The Extism exports answer fixed documents: canonicalize
;; {"results":[{"key":"x"}]}, project {"tools":[]}. canonicalize_direct reads
;; byte 14 of its request, the first letter of the first settings object
;; when it is a JSON string ({"settings":["L"]}), and:
;;   "L" loops forever              "T" traps (unreachable)
;;   "R" refuses ("refused directly") "A" answers at an address past memory
;;   "N" answers 2^31-1 bytes         "X" calls WASI proc_exit(2)
;;   "G" logs "hello" at info through the Extism kernel, then answers
;;   anything else: {"results":[{"key":"d"}]}
;; wasmhost_alloc always returns address 4096 (the second page is free).
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "log_info" (func $log_info (param i64)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))

  (memory (export "memory") 2)
  (data (i32.const 0) "{\"abi\":1,\"name\":\"wat-direct\",\"version\":\"0.1.0\"}")
  (data (i32.const 64) "{\"results\":[{\"key\":\"d\"}]}")
  (data (i32.const 128) "refused directly")
  (data (i32.const 192) "hello")
  (data (i32.const 256) "{\"results\":[{\"key\":\"x\"}]}")
  (data (i32.const 320) "{\"tools\":[]}")

  ;; $kernel copies len bytes at ptr into a new kernel block and returns it.
  (func $kernel (param $ptr i32) (param $len i32) (result i64)
    (local $off i64) (local $i i32)
    (local.set $off (call $alloc (i64.extend_i32_u (local.get $len))))
    (block $done
      (loop $copy
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (call $store_u8
          (i64.add (local.get $off) (i64.extend_i32_u (local.get $i)))
          (i32.load8_u (i32.add (local.get $ptr) (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $copy)))
    (local.get $off))

  (func $output (param $ptr i32) (param $len i32) (result i32)
    (call $output_set (call $kernel (local.get $ptr) (local.get $len)) (i64.extend_i32_u (local.get $len)))
    (i32.const 0))

  (func (export "handshake") (result i32) (call $output (i32.const 0) (i32.const 47)))
  (func (export "canonicalize") (result i32) (call $output (i32.const 256) (i32.const 25)))
  (func (export "project") (result i32) (call $output (i32.const 320) (i32.const 12)))

  (func (export "wasmhost_alloc") (param $n i32) (result i32) (i32.const 4096))

  ;; $at packs an answer's address and length.
  (func $at (param $ptr i32) (param $len i32) (result i64)
    (i64.or (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32)) (i64.extend_i32_u (local.get $len))))

  (func (export "canonicalize_direct") (param $ptr i32) (param $len i32) (result i64)
    (local $c i32)
    (if (i32.gt_u (local.get $len) (i32.const 14))
      (then (local.set $c (i32.load8_u (i32.add (local.get $ptr) (i32.const 14))))))
    (if (i32.eq (local.get $c) (i32.const 76)) ;; L
      (then (loop $forever (br $forever))))
    (if (i32.eq (local.get $c) (i32.const 84)) ;; T
      (then unreachable))
    (if (i32.eq (local.get $c) (i32.const 82)) ;; R
      (then (return (i64.or (call $at (i32.const 128) (i32.const 16)) (i64.const 0x80000000)))))
    (if (i32.eq (local.get $c) (i32.const 65)) ;; A
      (then (return (call $at (i32.const 0xFFFF0000) (i32.const 16)))))
    (if (i32.eq (local.get $c) (i32.const 78)) ;; N
      (then (return (call $at (i32.const 0) (i32.const 0x7FFFFFFF)))))
    (if (i32.eq (local.get $c) (i32.const 88)) ;; X
      (then (call $proc_exit (i32.const 2))))
    (if (i32.eq (local.get $c) (i32.const 71)) ;; G
      (then (call $log_info (call $kernel (i32.const 192) (i32.const 5)))))
    (call $at (i32.const 64) (i32.const 25)))
)
