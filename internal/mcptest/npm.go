package mcptest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// NPMInstall installs the npm packages pkgs (each "name@version") once per
// machine, together, in a directory under the user's cache directory named
// after them, and returns that directory: a package's files are then under
// its node_modules. Later calls with the same packages find it installed.
//
// Without npm or the registry it skips tb, except when the environment
// variable CI is set, where it fails tb: CI must not pass by skipping.
func NPMInstall(tb testing.TB, pkgs ...string) string {
	tb.Helper()
	unavailable := func(format string, args ...any) {
		tb.Helper()
		if os.Getenv("CI") != "" {
			tb.Fatalf(format, args...)
		}
		tb.Skipf("skipped: "+format, args...)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		unavailable("no cache directory for npm packages: %v", err)
	}
	parts := make([]string, len(pkgs))
	for i, p := range pkgs {
		parts[i] = strings.TrimPrefix(p, "@")
	}
	name := strings.NewReplacer("@", "-", "/", "-").Replace(strings.Join(parts, "+"))
	dir := filepath.Join(cache, "wasmhost-tests", name)
	// The directory is renamed into place only once npm has succeeded.
	if _, err := os.Stat(dir); err == nil {
		return dir
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		unavailable("npm is not installed")
	}
	// Install beside the final directory and rename it into place, so an
	// interrupted install is never taken for a complete one.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		tb.Fatalf("npm packages %s: %v", strings.Join(pkgs, " "), err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), name+".tmp-")
	if err != nil {
		tb.Fatalf("npm packages %s: %v", strings.Join(pkgs, " "), err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append([]string{"install", "--prefix", tmp, "--no-audit", "--no-fund", "--loglevel=error"}, pkgs...)
	if out, err := exec.CommandContext(ctx, npm, args...).CombinedOutput(); err != nil {
		unavailable("npm could not install %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(dir); statErr != nil { // not a concurrent install that won
			tb.Fatalf("npm packages %s: %v", strings.Join(pkgs, " "), err)
		}
	}
	return dir
}

// ServerEverything pins the MCP project's test server in Node.js, the
// third-party upstream of the end-to-end tests and of BenchmarkToolCall's
// upstream=node.
const ServerEverything = "@modelcontextprotocol/server-everything@2026.8.31"

// ServerEverythingScript installs ServerEverything (NPMInstall) and returns
// its entry script, which `node script stdio` serves over stdin and stdout.
func ServerEverythingScript(tb testing.TB) string {
	tb.Helper()
	dir := NPMInstall(tb, ServerEverything)
	return filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}
