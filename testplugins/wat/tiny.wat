;; tiny.wat: the smallest callable module, used by the host benchmarks to
;; compare the cost of an empty Extism call with a raw wazero call.
(module
  (memory (export "memory") 1)
  (func (export "noop") (result i32)
    (i32.const 0)))
