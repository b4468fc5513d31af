package mcptest

import (
	"context"
	"fmt"
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
	dir, err := NPMTryInstall(context.Background(), pkgs...)
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatal(err)
		}
		tb.Skipf("skipped: %v", err)
	}
	return dir
}

// NPMTryInstall is NPMInstall for a caller that reports a package it could
// not install instead of skipping: it returns the directory, or why npm,
// the cache directory or the registry could not provide it. The install is
// bounded by ctx and by five minutes.
func NPMTryInstall(ctx context.Context, pkgs ...string) (string, error) {
	what := strings.Join(pkgs, " ")
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("npm packages %s: no cache directory: %w", what, err)
	}
	parts := make([]string, len(pkgs))
	for i, p := range pkgs {
		parts[i] = strings.TrimPrefix(p, "@")
	}
	name := strings.NewReplacer("@", "-", "/", "-").Replace(strings.Join(parts, "+"))
	dir := filepath.Join(cache, "wasmhost-tests", name)
	// The directory is renamed into place only once npm has succeeded.
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("npm packages %s: npm is not installed", what)
	}
	// Install beside the final directory and rename it into place, so an
	// interrupted install is never taken for a complete one.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("npm packages %s: %w", what, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), name+".tmp-")
	if err != nil {
		return "", fmt.Errorf("npm packages %s: %w", what, err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	args := append([]string{"install", "--prefix", tmp, "--no-audit", "--no-fund", "--loglevel=error"}, pkgs...)
	if out, err := exec.CommandContext(ctx, npm, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm could not install %s: %w\n%s", what, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(dir); statErr != nil { // not a concurrent install that won
			return "", fmt.Errorf("npm packages %s: %w", what, err)
		}
	}
	return dir, nil
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
