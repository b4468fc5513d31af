package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/wasmhost/wasmhost/config"
)

// listen binds cfg's listen address (or Options.Listen), refusing a
// malformed one (ErrBadListen) and one that is not loopback without
// AllowRemote (ErrNotLoopback).
func (d *Daemon) listen(cfg *config.Config) (net.Listener, error) {
	// where names the listen address in errors: the config's "listen",
	// located like a config error, or Options.Listen.
	listen, where := cfg.Listen, fmt.Sprintf("%s: listen: %q", d.file, cfg.Listen)
	if d.opts.Listen != "" {
		listen, where = d.opts.Listen, fmt.Sprintf("listen %q", d.opts.Listen)
	}
	if err := checkListen(listen, d.opts.AllowRemote); err != nil {
		return nil, fmt.Errorf("daemon: %s: %w", where, err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		var dnsErr *net.DNSError
		var addrErr *net.AddrError
		if errors.As(err, &dnsErr) || errors.As(err, &addrErr) {
			return nil, fmt.Errorf("daemon: %s: %w: %w", where, ErrBadListen, err)
		}
		return nil, fmt.Errorf("daemon: %s: %w", where, err)
	}
	d.addr = ln.Addr()
	d.listenAt = cfg.Listen
	d.allowed = allowedHosts(listen, d.opts.AllowedHosts)
	return ln, nil
}

// maxClients is Options.MaxClients with its default (0: no limit).
func (d *Daemon) maxClients() int {
	switch n := d.opts.MaxClients; {
	case n < 0:
		return 0
	case n == 0:
		return DefaultMaxClients
	default:
		return n
	}
}

// checkListen refuses a malformed address (ErrBadListen), and a
// non-loopback address unless remote is allowed (ErrNotLoopback).
func checkListen(listen string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadListen, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%w: %w", ErrBadListen, err)
	}
	if allowRemote || isLoopback(host) {
		return nil
	}
	return ErrNotLoopback
}

// isLoopback reports whether host is "localhost" or a loopback IP.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// httpServer returns the daemon's HTTP server. It has no ReadTimeout or
// WriteTimeout: they would cut event streams and long calls.
func (d *Daemon) httpServer() *http.Server {
	return &http.Server{
		Handler:           d.routes(),
		ReadHeaderTimeout: d.opts.ReadHeaderTimeout,
		IdleTimeout:       d.opts.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnContext:       connContext,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelDebug),
	}
}
