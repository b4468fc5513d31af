// Package config defines the wasmhost config file and its strict loader:
// the types of the file's servers, sessions, overrides, admin and policy
// blocks, the override rule ([Session.Effective]) and validation that
// reports every problem with the file name and JSON path ([ErrInvalid],
// [Error], [Warning]).
//
// It owns the file format only: it reads files (the config, token files)
// and environment variables named by tokenEnv, and touches no connection,
// plugin or session. Unknown keys are errors, except the gemini-cli keys
// in [IgnoredServerKeys], which are warnings; a caller may declare more
// keys ([Options.ServerKeys], the policy plugin's). Tokens never appear in
// errors, warnings, String, GoString or slog output.
//
// Every key, the override rule and which setting filters which kind of
// item are in docs/config.md; why the loader is strict is in
// docs/design.md.
package config
