;; Rebuild (in this directory): wat2wasm spinfill.wat -o spinfill.wasm
;;
;; Fills of len bytes forever, in a 64 MiB memory: without charges for its
;; length, a turn of this loop, a few milliseconds, would be one unit of
;; fuel. (The memory is declared, not grown by the call: a 64 MiB grow takes
;; a second under the race detector.)
(module
  (memory 1024)
  (func (export "spin_fill") (param $len i32)
    (loop $l
      (memory.fill (i32.const 1024) (i32.const 0) (local.get $len))
      (br $l)))
)
