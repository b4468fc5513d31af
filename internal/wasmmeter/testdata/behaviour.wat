;; Rebuild (in this directory): wat2wasm --debug-names behaviour.wat -o behaviour.wasm
;;
;; Behaviour that instrumentation must preserve: loops (with params and
;; multiple results), recursion, direct calls to imported and defined
;; functions, indirect calls through tables filled by active element segments
;; (function-index and expression forms), passive and declarative segments,
;; ref.func in code and in a global initialiser, a start function, br_table,
;; typed select and bulk memory. The element segments use all eight
;; encodings (flags 0 to 7).
(module
  (type $binop (func (param i32 i32) (result i32)))
  (import "env" "add" (func $imp_add (type $binop)))
  (import "env" "twice" (func $imp_twice (param i32) (result i32)))

  (memory (export "memory") 1)
  (data $d "hello, wasm")
  (table $t 32 funcref)
  (table $t2 4 funcref)

  (global $started (mut i32) (i32.const 0))
  (global $gf (mut funcref) (ref.func $max))
  (global $gnull funcref (ref.null func))

  (elem (i32.const 0) $add $sub $imp_add)
  (elem (table $t) (i32.const 3) funcref (ref.func $mul) (ref.null func) (ref.func $max))
  (elem (table $t2) (i32.const 0) func $sub $add)
  (elem $pass func $sub $mul $imp_add)
  (elem (table $t2) (i32.const 2) funcref (ref.func $mul) (ref.null func))
  (elem $passexpr funcref (ref.func $max) (ref.func $add) (ref.null func))
  (elem declare funcref (ref.func $fib) (ref.null func))

  (func $add (type $binop) (i32.add (local.get 0) (local.get 1)))
  (func $sub (type $binop) (i32.sub (local.get 0) (local.get 1)))
  (func $mul (type $binop) (i32.mul (local.get 0) (local.get 1)))
  (func $max (type $binop)
    (select (result i32) (local.get 0) (local.get 1) (i32.gt_s (local.get 0) (local.get 1))))

  ;; sum of 1..n in a loop
  (func $sum (export "sum") (param $n i32) (result i64)
    (local $acc i64)
    (block $done
      (loop $l
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $acc (i64.add (local.get $acc) (i64.extend_i32_u (local.get $n))))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $l)))
    (local.get $acc))

  ;; naive recursion
  (func $fib (export "fib") (param $n i32) (result i32)
    (if (result i32) (i32.lt_u (local.get $n) (i32.const 2))
      (then (local.get $n))
      (else (i32.add
        (call $fib (i32.sub (local.get $n) (i32.const 1)))
        (call $fib (i32.sub (local.get $n) (i32.const 2)))))))

  ;; fibonacci pair carried on the stack by a loop with params and results
  (func $pair (export "pair") (param $n i32) (result i32 i32)
    (i32.const 0)
    (i32.const 1)
    (loop $l (param i32 i32) (result i32 i32)
      (local.get $n)
      (if (param i32 i32) (result i32 i32)
        (then
          (local.set $n (i32.sub (local.get $n) (i32.const 1)))
          (call $step)
          (br $l)))))
  (func $step (param i32 i32) (result i32 i32)
    (local.get 1)
    (i32.add (local.get 0) (local.get 1)))

  ;; call through table $t at index i
  (func (export "indirect") (param $i i32) (param $x i32) (param $y i32) (result i32)
    (call_indirect $t (type $binop) (local.get $x) (local.get $y) (local.get $i)))

  ;; call through table $t2
  (func (export "indirect2") (param $i i32) (param $x i32) (param $y i32) (result i32)
    (call_indirect $t2 (type $binop) (local.get $x) (local.get $y) (local.get $i)))

  ;; a funcref global initialised by ref.func
  (func (export "via_global") (param $x i32) (param $y i32) (result i32)
    (table.set $t (i32.const 20) (global.get $gf))
    (call_indirect $t (type $binop) (local.get $x) (local.get $y) (i32.const 20)))

  ;; ref.func in code
  (func (export "via_code_ref") (param $x i32) (result i32)
    (table.set $t (i32.const 21) (ref.func $fib))
    (call_indirect $t (param i32) (result i32) (local.get $x) (i32.const 21)))

  ;; passive segments copied in with table.init
  (func (export "via_passive") (param $i i32) (param $x i32) (param $y i32) (result i32)
    (table.init $t $pass (i32.const 10) (i32.const 0) (i32.const 3))
    (table.init $t $passexpr (i32.const 13) (i32.const 0) (i32.const 2))
    (call_indirect $t (type $binop) (local.get $x) (local.get $y)
      (i32.add (i32.const 10) (local.get $i))))

  ;; the null entry traps
  (func (export "null_entry") (result i32)
    (call_indirect $t (type $binop) (i32.const 1) (i32.const 2) (i32.const 4)))

  (func (export "is_null") (result i32)
    (i32.add (ref.is_null (global.get $gnull)) (ref.is_null (global.get $gf))))

  (func (export "imported") (param $x i32) (result i32)
    (call $imp_add (call $imp_twice (local.get $x)) (i32.const 1)))

  (func (export "started") (result i32) (global.get $started))

  ;; br_table dispatch inside a loop, as Go's backend does
  (func (export "dispatch") (param $n i32) (result i32)
    (local $pc i32) (local $acc i32)
    (loop $top
      (block $exit
        (block $c2
          (block $c1
            (block $c0
              (br_table $c0 $c1 $c2 $exit (local.get $pc)))
            ;; case 0
            (local.set $acc (i32.add (local.get $acc) (i32.const 1)))
            (local.set $pc (i32.const 1))
            (br $top))
          ;; case 1
          (local.set $acc (i32.mul (local.get $acc) (i32.const 3)))
          (local.set $pc (i32.const 2))
          (br $top))
        ;; case 2
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (local.set $pc (select (i32.const 0) (i32.const 3) (local.get $n)))
        (br $top)))
    (local.get $acc))

  ;; bulk memory and loads
  (func (export "memsum") (result i32)
    (local $i i32) (local $acc i32)
    (memory.init $d (i32.const 100) (i32.const 0) (i32.const 11))
    (memory.copy (i32.const 200) (i32.const 100) (i32.const 11))
    (memory.fill (i32.const 205) (i32.const 33) (i32.const 2))
    (loop $l
      (local.set $acc (i32.add (local.get $acc)
        (i32.mul (i32.load8_u offset=200 (local.get $i)) (i32.add (local.get $i) (i32.const 1)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 11))))
    (local.get $acc))

  (func $init
    (global.set $started (i32.add (i32.const 40) (call $imp_twice (i32.const 1)))))
  (start $init)
)
