package host

import (
	"context"
	"log/slog"
	"sync"
)

// recordHandler is a slog.Handler that keeps every record, at every level.
type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func slogNew(h *recordHandler) *slog.Logger { return slog.New(h) }

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// messages returns "LEVEL message" for each record.
func (h *recordHandler) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		out = append(out, r.Level.String()+" "+r.Message)
	}
	return out
}

// attr returns the value of the attribute key in each record that has it.
func (h *recordHandler) attr(key string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				out = append(out, a.Value.String())
			}
			return true
		})
	}
	return out
}
