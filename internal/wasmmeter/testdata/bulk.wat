;; Rebuild (in this directory): wat2wasm bulk.wat -o bulk.wasm
;;
;; Bulk memory and table instructions, whose lengths the rewriter charges
;; fuel for: lengths known only at run time (in functions with and without
;; parameters and locals, which the added local must not disturb) and
;; constant ones. Each counted export is a loop from its first instruction,
;; so that its checks are: one per turn, plus the charges.
(module
  (type $v (func (result i32)))
  (memory 4) ;; 256 KiB
  (data $d "0123456789abcdefghijklmnopqrstuvwxyz")
  (table $t 4096 funcref)
  (elem $e func $one $two $one $two)

  (func $one (type $v) (i32.const 1))
  (func $two (type $v) (i32.const 2))

  ;; n fills of len bytes at 0 with the byte n, n-1, ..., 1
  (func (export "fill") (param $len i32) (param $n i32)
    (loop $l
      (memory.fill (i32.const 0) (local.get $n) (local.get $len))
      (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1))))))

  ;; n copies of len bytes from src to dst; the unused locals put the added
  ;; one at index 6
  (func (export "copy") (param $dst i32) (param $src i32) (param $len i32) (param $n i32)
    (local $x i64) (local $y f32)
    (loop $l
      (memory.copy (local.get $dst) (local.get $src) (local.get $len))
      (local.set $dst (i32.add (local.get $dst) (i32.const 1)))
      (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1))))))

  ;; n fills of 32000 bytes (2000 units) and of 15 bytes (no unit)
  (func (export "fill_const") (param $n i32)
    (loop $l
      (memory.fill (i32.const 64) (local.get $n) (i32.const 32000))
      (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1))))))
  (func (export "fill_small") (param $n i32)
    (loop $l
      (memory.fill (i32.const 64) (local.get $n) (i32.const 15))
      (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1))))))

  ;; len bytes of the data segment from offset off, to dst
  (func (export "init") (param $dst i32) (param $off i32) (param $len i32)
    (memory.init $d (local.get $dst) (local.get $off) (local.get $len)))

  ;; the sum of the bytes in [0, len)
  (func (export "sum") (param $len i32) (result i32)
    (local $i i32) (local $acc i32)
    (block $done
      (loop $l
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (local.set $acc (i32.add (local.get $acc) (i32.load8_u (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
    (local.get $acc))

  ;; n fills of len table elements at 0 with $two
  (func (export "tfill") (param $len i32) (param $n i32)
    (loop $l
      (table.fill $t (i32.const 0) (ref.func $two) (local.get $len))
      (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1))))))

  ;; table.init and table.copy with runtime lengths, and a constant one
  (func (export "tinit") (param $dst i32) (param $len i32)
    (table.init $t $e (local.get $dst) (i32.const 0) (local.get $len)))
  (func (export "tcopy") (param $dst i32) (param $src i32) (param $len i32)
    (table.copy $t $t (local.get $dst) (local.get $src) (local.get $len))
    (table.copy $t $t (i32.const 100) (local.get $src) (i32.const 4)))

  ;; the sum of the results of table entries [0, len)
  (func (export "tsum") (param $len i32) (result i32)
    (local $i i32) (local $acc i32)
    (block $done
      (loop $l
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (local.set $acc (i32.add (local.get $acc) (call_indirect $t (type $v) (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
    (local.get $acc))

  ;; a bulk instruction in unreachable code, whose operands are polymorphic
  (func (export "dead") (param $len i32)
    (unreachable)
    (memory.fill (i32.const 0) (i32.const 0) (local.get $len)))
)
