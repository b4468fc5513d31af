package session

import (
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/wasmhost/wasmhost/internal/clip"
)

// The bounds of the warnings about upstream items a session leaves out
// (names the MCP rule refuses, schemas or URIs the go-sdk refuses, name
// collisions): an upstream decides how many such items it lists (as many
// as 32 MiB hold) and how often it changes them (a rediscovery every 100
// ms), and each session would log each one.
const (
	leftOutBurst = 10
	leftOutEvery = time.Second
	// leftOutValue bounds each value of such a warning: the upstream's
	// names and URIs, and the errors that quote them.
	leftOutValue = 512
)

// A leftOutLog passes an endpoint's warnings about items left out, at most
// leftOutBurst at once and then one every leftOutEvery; the next warning
// after some were dropped says how many.
type leftOutLog struct {
	lim     *rate.Limiter
	dropped atomic.Int64
}

func newLeftOutLog() *leftOutLog {
	return &leftOutLog{lim: rate.NewLimiter(rate.Every(leftOutEvery), leftOutBurst)}
}

// warnLeftOut logs msg with args (key, value pairs), within the bounds of
// e.leftOut, each string or error value cut to leftOutValue bytes.
func (e *Endpoint) warnLeftOut(msg string, args ...any) {
	if !e.leftOut.lim.Allow() {
		e.leftOut.dropped.Add(1)
		return
	}
	for i := 1; i < len(args); i += 2 {
		switch v := args[i].(type) {
		case string:
			args[i] = clip.String(v, leftOutValue)
		case error:
			args[i] = clip.String(v.Error(), leftOutValue)
		}
	}
	if n := e.leftOut.dropped.Swap(0); n > 0 {
		args = append(args, "notLogged", n)
	}
	e.log.Warn(msg, args...)
}
