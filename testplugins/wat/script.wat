;; script.wat: a well-formed ABI v1 policy plugin whose behaviour each host
;; test chooses through the settings it sends.
;;
;; Normal behaviour (echo):
;;   - canonicalize answers {"results":[s0,s1,...]} for the input
;;     {"settings":[s0,s1,...]}: each settings object IS its result, so a
;;     test sends {"key":"a"} or {"error":"no"} and gets it back.
;;   - project answers the settings object itself, so a test sends the
;;     ProjectResponse it wants the plugin to return.
;;   - project_batch answers {"results":[s0,s1,...]} for the input
;;     {"settings":[s0,s1,...],...}: each settings object IS the result of
;;     the item of the same position, so a test sends items [0,k],[1,k],...
;;     with settings objects such as {"tools":[{"i":0}]} or {"error":"no"}.
;;
;; Misbehaviour: when the first settings object (canonicalize,
;; project_batch) or the settings (project) is a JSON string, its first
;; letter selects one:
;;   "L" loop forever             "T" trap (unreachable)
;;   "R" refuse (status 1 + error) "Z" status 1 without an error message
;;   "E" error message, status 0  "J" output that is not JSON
;;   "X" WASI proc_exit(2)        "C" valid output, then proc_exit(0)
;;   "B" output one byte over the 16 MiB output cap
;;   "H" an HTTP request to 127.0.0.1 through the Extism kernel
;;   "P" probe the sandbox: key = hex of walltime ns (u64 LE), nanotime ns
;;       (u64 LE), 16 random bytes, environ count, environ size, args count,
;;       args size (u32 LE each)
;;   "M" grow memory until refused: key = hex of memory.size pages (u32 LE)
;;   "G" log "hello from script" at info level through the Extism kernel,
;;       write "written to stderr" + newline to WASI stderr, answer key "c"
;;   "A" set an Extism error message, then trap (unreachable), as
;;       AssemblyScript's abort handler in docs/plugins.md does
;;   "W" write the start of a Go panic's report to WASI stderr, then trap
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "error_set" (func $error_set (param i64)))
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "input_load_u64" (func $input_load_u64 (param i64) (result i64)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "http_request" (func $http_request (param i64 i64) (result i64)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "extism:host/env" "log_info" (func $log_info (param i64)))

  (memory (export "memory") 1)

  ;; NUL-terminated strings, one 64-byte slot each.
  (data (i32.const 0) "{\"abi\":1,\"name\":\"wat-script\",\"version\":\"0.1.0\"}\00")
  (data (i32.const 64) "{\"results\":\00")
  (data (i32.const 128) "refused by script\00")
  (data (i32.const 192) "error with status 0\00")
  (data (i32.const 256) "{\"results\":[\00")
  (data (i32.const 320) "{\"results\":[{\"key\":\"c\"}]}\00")
  (data (i32.const 384) "{\"url\":\"http://127.0.0.1:9/\"}\00")
  (data (i32.const 448) "{\"results\":[{\"key\":\"\00")
  (data (i32.const 512) "\"}]}\00")
  (data (i32.const 576) "0123456789abcdef")
  ;; 640..688: probe buffer; 704..708: memory size buffer.
  (data (i32.const 768) "written to stderr\n")
  ;; 800: one WASI iovec {buf 768, len 18}; 808: bytes written.
  (data (i32.const 800) "\00\03\00\00\12\00\00\00")
  (data (i32.const 832) "hello from script\00")
  (data (i32.const 896) "abort: index out of range at assembly/index.ts:3:5\00")
  (data (i32.const 960) "panic: boom\n\ngoroutine 1 [running]:\nmain.f()\n\tacme/policy.go:7 +0x5\n")
  ;; 1056: one WASI iovec {buf 960, len 68}; 1064: bytes written.
  (data (i32.const 1056) "\c0\03\00\00\44\00\00\00")

  (func $strlen (param $p i32) (result i32)
    (local $n i32)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br $next)))
    (local.get $n))

  ;; $copy_mem copies n bytes at guest address p to Extism memory at dst.
  (func $copy_mem (param $dst i64) (param $p i32) (param $n i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $store_u8
          (i64.add (local.get $dst) (i64.extend_i32_u (local.get $i)))
          (i32.load8_u (i32.add (local.get $p) (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next))))

  ;; $copy_in copies input bytes [from, to) to Extism memory at dst, eight
  ;; bytes per kernel call while it can.
  (func $copy_in (param $dst i64) (param $from i32) (param $to i32)
    (local $i i32)
    (local.set $i (local.get $from))
    (block $done
      (loop $next
        (br_if $done (i32.gt_u (i32.add (local.get $i) (i32.const 8)) (local.get $to)))
        (call $store_u64
          (i64.add (local.get $dst) (i64.extend_i32_u (i32.sub (local.get $i) (local.get $from))))
          (call $input_load_u64 (i64.extend_i32_u (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 8)))
        (br $next)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $to)))
        (call $store_u8
          (i64.add (local.get $dst) (i64.extend_i32_u (i32.sub (local.get $i) (local.get $from))))
          (call $in (local.get $i)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next))))

  (func $in (param $i i32) (result i32)
    (call $input_load_u8 (i64.extend_i32_u (local.get $i))))

  ;; $block copies the NUL-terminated string at p into a new Extism block.
  (func $block (param $p i32) (result i64)
    (local $off i64) (local $n i32)
    (local.set $n (call $strlen (local.get $p)))
    (local.set $off (call $alloc (i64.extend_i32_u (local.get $n))))
    (call $copy_mem (local.get $off) (local.get $p) (local.get $n))
    (local.get $off))

  (func $output (param $p i32)
    (call $output_set (call $block (local.get $p))
      (i64.extend_i32_u (call $strlen (local.get $p)))))

  (func $error (param $p i32)
    (call $error_set (call $block (local.get $p))))

  ;; $key_output answers {"results":[{"key":"<hex of n bytes at p>"}]}.
  (func $key_output (param $p i32) (param $n i32)
    (local $off i64) (local $k i64) (local $len i32) (local $i i32) (local $b i32)
    (local.set $len (i32.add (i32.add (call $strlen (i32.const 448))
      (i32.shl (local.get $n) (i32.const 1))) (call $strlen (i32.const 512))))
    (local.set $off (call $alloc (i64.extend_i32_u (local.get $len))))
    (call $copy_mem (local.get $off) (i32.const 448) (call $strlen (i32.const 448)))
    (local.set $k (i64.add (local.get $off) (i64.extend_i32_u (call $strlen (i32.const 448)))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $b (i32.load8_u (i32.add (local.get $p) (local.get $i))))
        (call $store_u8 (local.get $k)
          (i32.load8_u (i32.add (i32.const 576) (i32.shr_u (local.get $b) (i32.const 4)))))
        (call $store_u8 (i64.add (local.get $k) (i64.const 1))
          (i32.load8_u (i32.add (i32.const 576) (i32.and (local.get $b) (i32.const 15)))))
        (local.set $k (i64.add (local.get $k) (i64.const 2)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (call $copy_mem (local.get $k) (i32.const 512) (call $strlen (i32.const 512)))
    (call $output_set (local.get $off) (i64.extend_i32_u (local.get $len))))

  ;; $directive runs the misbehaviour letter c selects and returns the
  ;; export's status, or -1 when c selects none.
  (func $directive (param $c i32) (result i32)
    (local $big i64)
    (if (i32.eq (local.get $c) (i32.const 0x4c)) ;; L
      (then (loop $forever (br $forever))))
    (if (i32.eq (local.get $c) (i32.const 0x54)) ;; T
      (then unreachable))
    (if (i32.eq (local.get $c) (i32.const 0x52)) ;; R
      (then (call $error (i32.const 128)) (return (i32.const 1))))
    (if (i32.eq (local.get $c) (i32.const 0x5a)) ;; Z
      (then (return (i32.const 1))))
    (if (i32.eq (local.get $c) (i32.const 0x45)) ;; E
      (then (call $error (i32.const 192)) (return (i32.const 0))))
    (if (i32.eq (local.get $c) (i32.const 0x4a)) ;; J
      (then (call $output (i32.const 256)) (return (i32.const 0))))
    (if (i32.eq (local.get $c) (i32.const 0x58)) ;; X
      (then (call $proc_exit (i32.const 2))))
    (if (i32.eq (local.get $c) (i32.const 0x43)) ;; C
      (then (call $output (i32.const 320)) (call $proc_exit (i32.const 0))))
    (if (i32.eq (local.get $c) (i32.const 0x42)) ;; B
      (then
        (local.set $big (call $alloc (i64.const 16777217)))
        (call $output_set (local.get $big) (i64.const 16777217))
        (return (i32.const 0))))
    (if (i32.eq (local.get $c) (i32.const 0x48)) ;; H
      (then
        (drop (call $http_request (call $block (i32.const 384)) (i64.const 0)))
        (call $output (i32.const 320))
        (return (i32.const 0))))
    (if (i32.eq (local.get $c) (i32.const 0x50)) ;; P
      (then
        (drop (call $clock_time_get (i32.const 0) (i64.const 1) (i32.const 640)))
        (drop (call $clock_time_get (i32.const 1) (i64.const 1) (i32.const 648)))
        (drop (call $random_get (i32.const 656) (i32.const 16)))
        (drop (call $environ_sizes_get (i32.const 672) (i32.const 676)))
        (drop (call $args_sizes_get (i32.const 680) (i32.const 684)))
        (call $key_output (i32.const 640) (i32.const 48))
        (return (i32.const 0))))
    (if (i32.eq (local.get $c) (i32.const 0x4d)) ;; M
      (then
        (block $full
          (loop $more
            (br_if $full (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
            (br $more)))
        (i32.store (i32.const 704) (memory.size))
        (call $key_output (i32.const 704) (i32.const 4))
        (return (i32.const 0))))
    (if (i32.eq (local.get $c) (i32.const 0x47)) ;; G
      (then
        (call $log_info (call $block (i32.const 832)))
        (drop (call $fd_write (i32.const 2) (i32.const 800) (i32.const 1) (i32.const 808)))
        (call $output (i32.const 320))
        (return (i32.const 0))))
    (if (i32.eq (local.get $c) (i32.const 0x41)) ;; A
      (then (call $error (i32.const 896)) unreachable))
    (if (i32.eq (local.get $c) (i32.const 0x57)) ;; W
      (then
        (drop (call $fd_write (i32.const 2) (i32.const 1056) (i32.const 1) (i32.const 1064)))
        unreachable))
    (i32.const -1))

  (func (export "handshake") (result i32)
    (call $output (i32.const 0))
    (i32.const 0))

  ;; Input: {"settings":[...]} (the host's encoding; the array starts at 12).
  (func (export "canonicalize") (result i32)
    (local $n i32) (local $r i32) (local $off i64)
    (local.set $n (i32.wrap_i64 (call $input_length)))
    (if (i32.and (i32.gt_u (local.get $n) (i32.const 15))
                 (i32.eq (call $in (i32.const 13)) (i32.const 0x22)))
      (then
        (local.set $r (call $directive (call $in (i32.const 14))))
        (if (i32.ge_s (local.get $r) (i32.const 0)) (then (return (local.get $r))))))
    ;; {"results": + input[12 : n-1] + }
    (local.set $off (call $alloc (i64.extend_i32_u (i32.sub (local.get $n) (i32.const 1)))))
    (call $copy_mem (local.get $off) (i32.const 64) (i32.const 11))
    (call $copy_in (i64.add (local.get $off) (i64.const 11)) (i32.const 12) (i32.sub (local.get $n) (i32.const 1)))
    (call $store_u8 (i64.add (local.get $off) (i64.extend_i32_u (i32.sub (local.get $n) (i32.const 2))))
      (i32.const 0x7d))
    (call $output_set (local.get $off) (i64.extend_i32_u (i32.sub (local.get $n) (i32.const 1))))
    (i32.const 0))

  ;; $value_end returns the index just past the JSON array or object that
  ;; starts at input[from].
  (func $value_end (param $from i32) (result i32)
    (local $n i32) (local $i i32) (local $c i32) (local $depth i32) (local $str i32)
    (local.set $n (i32.wrap_i64 (call $input_length)))
    (local.set $i (local.get $from))
    (block $end
      (loop $scan
        (br_if $end (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $c (call $in (local.get $i)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (if (local.get $str)
          (then
            (if (i32.eq (local.get $c) (i32.const 0x5c)) ;; backslash: skip the escaped byte
              (then (local.set $i (i32.add (local.get $i) (i32.const 1)))))
            (if (i32.eq (local.get $c) (i32.const 0x22))
              (then (local.set $str (i32.const 0)))))
          (else
            (if (i32.eq (local.get $c) (i32.const 0x22))
              (then (local.set $str (i32.const 1))))
            (if (i32.or (i32.eq (local.get $c) (i32.const 0x7b)) (i32.eq (local.get $c) (i32.const 0x5b)))
              (then (local.set $depth (i32.add (local.get $depth) (i32.const 1)))))
            (if (i32.or (i32.eq (local.get $c) (i32.const 0x7d)) (i32.eq (local.get $c) (i32.const 0x5d)))
              (then
                (local.set $depth (i32.sub (local.get $depth) (i32.const 1)))
                (br_if $end (i32.eqz (local.get $depth)))))))
        (br $scan)))
    (local.get $i))

  ;; Input: {"settings":S,"tools":...} (S starts at 12). Answers S.
  (func (export "project") (result i32)
    (local $i i32) (local $r i32) (local $off i64)
    (if (i32.eq (call $in (i32.const 12)) (i32.const 0x22))
      (then
        (local.set $r (call $directive (call $in (i32.const 13))))
        (if (i32.ge_s (local.get $r) (i32.const 0)) (then (return (local.get $r))))))
    (local.set $i (call $value_end (i32.const 12)))
    (local.set $off (call $alloc (i64.extend_i32_u (i32.sub (local.get $i) (i32.const 12)))))
    (call $copy_in (local.get $off) (i32.const 12) (local.get $i))
    (call $output_set (local.get $off) (i64.extend_i32_u (i32.sub (local.get $i) (i32.const 12))))
    (i32.const 0))

  ;; Input: {"settings":[...],"snapshots":...} (the array starts at 12).
  ;; Answers {"results": + the settings array + }.
  (func (export "project_batch") (result i32)
    (local $i i32) (local $len i32) (local $r i32) (local $off i64)
    (if (i32.eq (call $in (i32.const 13)) (i32.const 0x22))
      (then
        (local.set $r (call $directive (call $in (i32.const 14))))
        (if (i32.ge_s (local.get $r) (i32.const 0)) (then (return (local.get $r))))))
    (local.set $i (call $value_end (i32.const 12)))
    ;; 11 bytes of {"results": + the array + one byte of }
    (local.set $len (i32.add (i32.sub (local.get $i) (i32.const 12)) (i32.const 12)))
    (local.set $off (call $alloc (i64.extend_i32_u (local.get $len))))
    (call $copy_mem (local.get $off) (i32.const 64) (i32.const 11))
    (call $copy_in (i64.add (local.get $off) (i64.const 11)) (i32.const 12) (local.get $i))
    (call $store_u8 (i64.add (local.get $off) (i64.extend_i32_u (i32.sub (local.get $len) (i32.const 1))))
      (i32.const 0x7d))
    (call $output_set (local.get $off) (i64.extend_i32_u (local.get $len)))
    (i32.const 0))
)
