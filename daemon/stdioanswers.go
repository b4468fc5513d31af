package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/wasmhost/wasmhost/internal/inflight"
)

// drainedMethods are the client requests a stop waits to see answered: the
// ones session.Endpoint.Drain waits for (or cuts short, which answers them
// too). Others, such as a subscriptions/listen that stays open until the
// client cancels it, are not waited for.
var drainedMethods = map[string]bool{"tools/call": true, "prompts/get": true, "resources/read": true}

// An answerLedger follows, beneath the go-sdk's connection (which must stay
// unwrapped), which of the client's calls have no answer written yet, so
// that a stop serves until they have. Reader is standard input as the
// go-sdk reads it: a decoder of the ledger's own reads a copy of the bytes,
// framing messages as the go-sdk does, and notes each call's id and each
// cancellation. Writer is standard output as the go-sdk writes it, one
// message per Write, and notes the id of each response.
type answerLedger struct {
	mu         sync.Mutex
	open       map[jsonrpc.ID]bool // calls read without their answer; each in unanswered
	lost       bool                // the input could not be followed: wait for nothing
	unanswered inflight.Gate
}

func newAnswerLedger() *answerLedger {
	return &answerLedger{open: make(map[jsonrpc.ID]bool)}
}

// opened notes a call read.
func (l *answerLedger) opened(id jsonrpc.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lost && !l.open[id] && l.unanswered.Enter() {
		l.open[id] = true
	}
}

// settle notes that the calls ids need no more waiting for (answered or
// cancelled), or, with lost, that none does.
func (l *answerLedger) settle(lost bool, ids ...jsonrpc.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lost {
		l.lost = true
		ids = slices.Collect(maps.Keys(l.open))
	}
	for _, id := range ids {
		if l.open[id] {
			delete(l.open, id)
			l.unanswered.Leave()
		}
	}
}

// wait returns once no call read so far lacks its answer, or with an error
// naming how many still do when ctx ends first.
func (l *answerLedger) wait(ctx context.Context) error {
	if err := l.unanswered.Wait(ctx); err != nil {
		return fmt.Errorf("answers not written: %w", err)
	}
	return nil
}

// Reader returns r, as the go-sdk should read it.
func (l *answerLedger) Reader(r io.Reader) io.Reader {
	pr, pw := io.Pipe()
	go l.follow(pr)
	return &ledgerReader{r: r, copy: pw}
}

type ledgerReader struct {
	r    io.Reader
	copy *io.PipeWriter
}

func (lr *ledgerReader) Read(p []byte) (int, error) {
	n, err := lr.r.Read(p)
	if n > 0 {
		_, _ = lr.copy.Write(p[:n]) // follow reads every byte, even once lost
	}
	if err != nil {
		lr.copy.CloseWithError(err)
	}
	return n, err
}

// follow decodes the copy of the input, message by message.
func (l *answerLedger) follow(r *io.PipeReader) {
	dec := json.NewDecoder(r)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if err != io.EOF {
				l.settle(true)
			}
			_, _ = io.Copy(io.Discard, r)
			return
		}
		l.read(raw)
	}
}

// incoming is what the ledger reads of a client message.
type incoming struct {
	ID     any    `json:"id"`
	Method string `json:"method"`
	Params struct {
		RequestID any `json:"requestId"`
	} `json:"params"`
}

// read notes what one message (or batch) from the client means for the
// ledger.
func (l *answerLedger) read(raw json.RawMessage) {
	var msgs []incoming
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
		if json.Unmarshal(raw, &msgs) != nil {
			return
		}
	} else {
		var m incoming
		if json.Unmarshal(raw, &m) != nil {
			return
		}
		msgs = []incoming{m}
	}
	for _, m := range msgs {
		switch {
		case drainedMethods[m.Method] && m.ID != nil:
			if id, err := jsonrpc.MakeID(m.ID); err == nil {
				l.opened(id)
			}
		case m.Method == "notifications/cancelled":
			if id, err := jsonrpc.MakeID(m.Params.RequestID); err == nil {
				l.settle(false, id) // needs no answer
			}
		}
	}
}

// Writer returns w, as the go-sdk should write to it.
func (l *answerLedger) Writer(w io.Writer) io.Writer { return &ledgerWriter{w: w, l: l} }

type ledgerWriter struct {
	w io.Writer
	l *answerLedger
}

// Write writes one message; once it is written, a response among it
// settles its call.
func (lw *ledgerWriter) Write(p []byte) (int, error) {
	n, err := lw.w.Write(p)
	if lw.l.unanswered.Len() == 0 { // reading what was written is worth it only then
		return n, err
	}
	if ids := responseIDs(p); len(ids) > 0 {
		lw.l.settle(false, ids...)
	}
	return n, err
}

// responseIDs returns the ids of the responses in one message (or batch)
// the go-sdk wrote. A response's id comes before its (possibly large)
// result in the go-sdk's encoding, so the common case reads a few tokens.
func responseIDs(p []byte) []jsonrpc.ID {
	dec := json.NewDecoder(bytes.NewReader(p))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		var batch []struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
		}
		if json.Unmarshal(p, &batch) != nil {
			return nil
		}
		var ids []jsonrpc.ID
		for _, m := range batch {
			if id, err := jsonrpc.MakeID(m.ID); err == nil && m.Method == "" && m.ID != nil {
				ids = append(ids, id)
			}
		}
		return ids
	}
	var id any
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		switch key {
		case "method":
			return nil // a request or notification of the server's
		case "result", "error":
			if jid, err := jsonrpc.MakeID(id); err == nil && id != nil {
				return []jsonrpc.ID{jid}
			}
			return nil
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if key == "id" {
			id = v
		}
	}
	return nil
}
