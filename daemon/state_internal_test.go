package daemon

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/wasmhost/wasmhost/internal/redact"
	"github.com/wasmhost/wasmhost/reconcile"
)

// discardWriter is an http.ResponseWriter (with WriteString, as
// net/http's) that counts what it is given.
type discardWriter struct {
	h http.Header
	n int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(int)     {}
func (w *discardWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}

// WriteString, as net/http's ResponseWriter has.
func (w *discardWriter) WriteString(s string) (int, error) {
	w.n += len(s)
	return len(s), nil
}

// BenchmarkWriteState writes the /v1/state answer of a daemon with 1,000
// sessions of 20 servers (7 tools each), whose 1,000 tokens are secrets
// the answer is redacted of.
func BenchmarkWriteState(b *testing.B) {
	const sessions, servers, tools = 1000, 20, 7
	d := &Daemon{secrets: &redact.Set{}}
	st := State{Config: "wasmhost.json", Pool: []EntryState{}}
	for s := range sessions {
		name := fmt.Sprintf("s%05d", s)
		d.secrets.Add(fmt.Sprintf("token-%05d-0123456789abcdef", s))
		sv := SessionView{Name: name, URL: "http://127.0.0.1:8750/mcp/" + name, TokenSource: "token", Prompts: []string{}, Resources: []string{}}
		for v := range servers {
			server := fmt.Sprintf("srv%03d", v)
			sv.Servers = append(sv.Servers, reconcile.BindingState{Server: server, Desired: "sha256:0123456789abcdef0123456789abcdef", Identity: "sha256:0123456789abcdef0123456789abcdef",
				EntryState: "ready", Key: `{"alwaysLoadTools":true,"excludeTools":["tool_0001"],"includeTools":["tool_0002","tool_0003"],"trust":true}`, Tools: tools})
			for t := range tools {
				sv.Tools = append(sv.Tools, fmt.Sprintf("%s__tool_%04d", server, t))
			}
		}
		st.Sessions = append(st.Sessions, sv)
	}
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.n = 0
		d.writeJSON(w, http.StatusOK, st)
	}
	b.ReportMetric(float64(w.n), "bytes")
}
