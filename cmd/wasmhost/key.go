package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/wasmhost/wasmhost/abi"
)

// runKey implements `wasmhost key`: it canonicalizes one settings object and
// prints two lines,
//
//	canonical: CANONICAL FORM AS COMPACT JSON
//	key: KEY
//
// or, with --json, one JSON object {"canonical": ..., "key": "..."}. The key
// is printed as is unless it holds a control character or a character that
// is not printable, in which case it is printed as a Go-quoted string. The
// settings come from the argument, from @FILE, or from standard input when
// the argument is "-" or missing. A refusal by the policy exits 1 with the
// policy's message on standard error.
func runKey(ctx context.Context, args []string, s stdio) int {
	var pf pluginFlags
	var asJSON bool
	fs := newFlagSet("key", "[flags] [SETTINGS | @FILE | -]", s)
	pf.register(fs)
	fs.BoolVar(&asJSON, "json", false, `print {"canonical": ..., "key": ...} instead of two lines`)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return parseStatus(err)
	}
	if len(pos) > 1 {
		s.errorf("key", "one settings argument expected, got %d", len(pos))
		return exitUsage
	}
	arg := "-"
	if len(pos) == 1 {
		arg = pos[0]
	}
	settings, err := readInput(arg, s.in)
	if err != nil {
		s.errorf("key", "settings: %v", err)
		return exitUsage
	}
	settings = bytes.TrimSpace(settings)
	if len(settings) == 0 {
		s.errorf("key", "no settings: give them as an argument ('{\"trust\":true}'), as @FILE, or on standard input")
		return exitUsage
	}
	if err := checkJSON(settings); err != nil {
		s.errorf("key", "settings are not valid JSON: %v", err)
		return exitUsage
	}

	p, err := pf.load(ctx, s.err)
	if err != nil {
		s.errorf("key", "load plugin: %v", err)
		return exitUsage
	}
	defer p.Close(context.WithoutCancel(ctx))

	resp, err := p.Canonicalize(ctx, &abi.CanonicalizeRequest{Settings: []json.RawMessage{settings}})
	if err != nil {
		s.errorf("key", "%v", err)
		return exitFail
	}
	r := resp.Results[0]
	if r.Error != "" {
		s.errorf("key", "settings refused: %s", r.Error)
		return exitFail
	}
	if asJSON {
		out := struct {
			Canonical json.RawMessage `json:"canonical,omitempty"`
			Key       string          `json:"key"`
		}{r.Canonical, r.Key}
		b, err := json.Marshal(out)
		if err != nil {
			s.errorf("key", "the policy's canonical form: %v", err)
			return exitFail
		}
		fmt.Fprintln(s.out, string(b))
		return exitOK
	}
	canonical := "(none)"
	if len(r.Canonical) > 0 {
		var b bytes.Buffer
		if err := json.Compact(&b, r.Canonical); err != nil {
			s.errorf("key", "the policy's canonical form is not valid JSON: %v", err)
			return exitFail
		}
		canonical = b.String()
	}
	fmt.Fprintf(s.out, "canonical: %s\nkey: %s\n", canonical, printableKey(r.Key))
	return exitOK
}

// printableKey returns key unchanged when it is printable on one line, and
// Go-quoted otherwise.
func printableKey(key string) string {
	for _, r := range key {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return strconv.Quote(key)
		}
	}
	return key
}

// checkJSON returns why data is not one valid JSON value, saying where
// ("at byte N"), or nil.
func checkJSON(data []byte) error {
	var v json.RawMessage
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	}
	return err
}
