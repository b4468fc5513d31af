package config

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error Parse returns, and by Load's errors
// for a file it could read: the file is not JSON, breaks the schema, or
// names a token that cannot be resolved. Each problem is an *Error; when
// there are several they are joined with errors.Join, in file order.
var ErrInvalid = errors.New("invalid config")

// An Error is one problem in a config file. It unwraps to ErrInvalid.
type Error struct {
	// File is the config file name as given to Load or Parse.
	File string
	// Path is the JSON path of the offending value, e.g.
	// `mcpServers.fs.args[2]`; "" for a syntax error or a problem with the
	// document as a whole.
	Path string
	// Line and Column (1-based, columns counted in characters) locate the
	// offending value or key.
	Line, Column int
	// Msg says what was expected. It never contains a token.
	Msg string
}

// Error returns "file: path: message", or "file:line:column: message" when
// the error has no path (syntax errors).
func (e *Error) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.File, e.Path, e.Msg)
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// A Warning is something in a config file that is accepted but ignored or
// suspicious, such as an unknown key.
type Warning struct {
	// File is the config file name as given to Load or Parse.
	File string
	// Path is the JSON path the warning is about.
	Path string
	// Message says what is ignored or why the value is suspicious.
	Message string
	// Session names the session whose entry under "sessions" the warning
	// is about; it is empty for the rest of the file. `wasmhost stdio`,
	// which serves one session, passes over the other sessions' warnings.
	Session string
}

// String returns "file: path: message".
func (w Warning) String() string {
	if w.Path == "" {
		return fmt.Sprintf("%s: %s", w.File, w.Message)
	}
	return fmt.Sprintf("%s: %s: %s", w.File, w.Path, w.Message)
}
