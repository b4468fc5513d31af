;; Rebuild (in this directory): wat2wasm --enable-tail-call tailcall.wat -o tailcall.wasm
;;
;; Tail calls (return_call, return_call_indirect): renumbered like call, and
;; a tail recursion that never ends must still reach the host.
(module
  (type $t (func (param i64 i64) (result i64)))
  (import "env" "nop" (func $nop))
  (table 2 funcref)
  (elem (i32.const 0) $fact $down)

  ;; fact(n, acc) by tail recursion
  (func $fact (export "fact") (type $t)
    (if (result i64) (i64.eqz (local.get 0))
      (then (local.get 1))
      (else (return_call $fact
        (i64.sub (local.get 0) (i64.const 1))
        (i64.mul (local.get 0) (local.get 1))))))

  ;; counts n down through the table
  (func $down (export "down") (type $t)
    (if (result i64) (i64.eqz (local.get 0))
      (then (local.get 1))
      (else (return_call_indirect (type $t)
        (i64.sub (local.get 0) (i64.const 1))
        (i64.add (local.get 1) (i64.const 2))
        (i32.const 1)))))

  ;; never returns, and has neither a loop nor a growing stack
  (func $forever (export "forever")
    (call $nop)
    (return_call $forever))
)
