//go:build wasip1

package main

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mathrand "math/rand"
	mathrandv2 "math/rand/v2"
	"net"
	"os"
	"sort"
	"time"

	"github.com/wasmhost/wasmhost/testplugins/hostile-go/sandboxprobe"
)

// probe tries to reach outside the sandbox and reports what it got.
func probe(d directive) json.RawMessage {
	o := sandboxprobe.Observations{
		Files:  map[string]string{},
		Dirs:   map[string]string{},
		Getenv: map[string]*string{},
		Dial:   map[string]string{},
	}
	files := []string{"/etc/passwd", "/", "/proc/self/environ"}
	if d.Path != "" {
		files = append(files, d.Path)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			o.Files[f] = err.Error()
		} else {
			o.Files[f] = fmt.Sprintf("read %d bytes: %q", len(b), b[:min(len(b), 64)])
		}
	}
	for _, dir := range []string{"/", "."} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			o.Dirs[dir] = err.Error()
			continue
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		o.Dirs[dir] = fmt.Sprintf("%d entries: %q", len(names), names)
	}

	o.Environ = os.Environ()
	vars := []string{"HOME", "PATH", "USER"}
	if d.Env != "" {
		vars = append(vars, d.Env)
	}
	for _, v := range vars {
		if val, ok := os.LookupEnv(v); ok {
			o.Getenv[v] = &val
		} else {
			o.Getenv[v] = nil
		}
	}
	o.Args = os.Args
	if h, err := os.Hostname(); err != nil {
		o.Hostname = err.Error()
	} else {
		o.Hostname = h
	}

	t1 := time.Now()
	t2 := time.Now()
	o.Times = []string{t1.UTC().Format(time.RFC3339Nano), t2.UTC().Format(time.RFC3339Nano)}
	o.Elapsed = int64(t2.Sub(t1))

	buf := make([]byte, 16)
	if _, err := cryptorand.Read(buf); err != nil {
		o.CryptoRand = err.Error()
	} else {
		o.CryptoRand = hex.EncodeToString(buf)
	}
	o.MathRand = []string{fmt.Sprint(mathrand.Int63()), fmt.Sprint(mathrandv2.Int64())}

	for _, addr := range []string{"127.0.0.1:22", "93.184.215.14:80", "[::1]:443"} {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			o.Dial[addr] = err.Error()
			continue
		}
		o.Dial[addr] = "connected to " + conn.RemoteAddr().String()
		_ = conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	addrs, err := net.DefaultResolver.LookupHost(ctx, "example.com")
	cancel()
	if err != nil {
		o.Dial["lookup example.com"] = err.Error()
	} else {
		o.Dial["lookup example.com"] = fmt.Sprintf("resolved to %q", addrs)
	}

	out, err := json.Marshal(&o)
	if err != nil {
		out, _ = json.Marshal(err.Error())
	}
	return out
}
