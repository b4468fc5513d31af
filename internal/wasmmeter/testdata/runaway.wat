;; Rebuild (in this directory): wat2wasm runaway.wat -o runaway.wasm
;;
;; Plugins that never return on their own: an infinite loop and an
;; exponential recursion without any loop; and a counted loop to measure how
;; often the host is called.
(module
  (func (export "spin")
    (loop $l (br $l)))

  ;; f(n) = f(n-1) + f(n-1): 2^n calls, no loop anywhere
  (func $exp (export "exp") (param $n i32) (result i64)
    (if (result i64) (i32.eqz (local.get $n))
      (then (i64.const 1))
      (else (i64.add
        (call $exp (i32.sub (local.get $n) (i32.const 1)))
        (call $exp (i32.sub (local.get $n) (i32.const 1)))))))

  ;; n iterations of a loop, entered once
  (func (export "count") (param $n i32) (result i32)
    (local $i i32)
    (loop $l
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (local.get $n))))
    (local.get $i))

  ;; n calls of a leaf function that has no loop
  (func $leaf (param i32) (result i32) (i32.add (local.get 0) (i32.const 1)))
  (func (export "calls") (param $n i32) (result i32)
    (local $i i32)
    (block $done
      (loop $l
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $i (call $leaf (local.get $i)))
        (br $l)))
    (local.get $i))
)
