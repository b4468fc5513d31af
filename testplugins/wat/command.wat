;; command.wat: a WASI command (it exports _start, not _initialize) whose
;; exports trap until _start has run, as Go's do when a Go plugin is built
;; without -buildmode=c-shared. Refused with ErrHandshake and ErrPluginTrap,
;; with a hint about the build mode.
(module
  (memory (export "memory") 1)
  (func (export "_start"))
  (func (export "handshake") (result i32) unreachable)
  (func (export "canonicalize") (result i32) unreachable)
  (func (export "project") (result i32) unreachable)
)
