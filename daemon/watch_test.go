package daemon_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
)

// at starts the daemon on the config file at path instead of the one
// start writes.
func at(path string) func(*daemon.Options) {
	return func(o *daemon.Options) { o.ConfigPath = path }
}

// configMapSwap updates a Kubernetes-style mount in dir as the kubelet
// does: the new files go into a fresh directory, a "..data" symlink is
// swapped onto it by rename, and the old directory is removed. The names
// operators use (dir/wasmhost.json, dir/alice.token) are symlinks through
// "..data" and never see an event themselves.
func configMapSwap(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	data := filepath.Join(dir, "..data")
	old, _ := os.Readlink(data)
	require.NoError(t, os.Mkdir(filepath.Join(dir, version), 0o700))
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, version, name), []byte(content), 0o600))
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			require.NoError(t, os.Symlink(filepath.Join("..data", name), link))
		}
	}
	require.NoError(t, os.Symlink(version, data+"_tmp"))
	require.NoError(t, os.Rename(data+"_tmp", data))
	if old != "" {
		require.NoError(t, os.RemoveAll(filepath.Join(dir, old)))
	}
}

// waitWatching waits until the daemon's watcher watches dir (its debug
// log says so once the watch is in place): an event in dir from then on
// reaches it.
func (r *running) waitWatching(dir string) {
	r.t.Helper()
	// slog quotes a value with spaces, quotes or '=' in it.
	plain, quoted := `msg="watching directory" dir=`+dir+"\n", `msg="watching directory" dir=`+strconv.Quote(dir)+"\n"
	waitFor(r.t, eventWithin, func() bool {
		logs := r.logs.String()
		return strings.Contains(logs, plain) || strings.Contains(logs, quoted)
	}, r.logs.String, "the watcher watching %s", dir)
}

func TestWatchConfigMapSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := set(baseConfig(), "sessions.alice", map[string]any{"tokenFile": "alice.token"})
	configMapSwap(t, dir, "..v1", map[string]string{"wasmhost.json": mustJSON(t, cfg), "alice.token": aliceToken})
	r := start(t, baseConfig(), at(filepath.Join(dir, "wasmhost.json")))
	alice := r.connect("alice", aliceToken)
	require.Len(t, alice.tools(t), 6)

	// A new version of the config: alice sees one tool.
	set(cfg, "sessions.alice.overrides", map[string]any{"demo": map[string]any{"includeTools": []string{"echo"}}})
	configMapSwap(t, dir, "..v2", map[string]string{"wasmhost.json": mustJSON(t, cfg), "alice.token": aliceToken})
	alice.waitChanged(t)
	require.Equal(t, []string{"demo__echo"}, alice.tools(t))
	// Every file of the mount is new, so each counts as changed.
	r.waitLog("reload (watch config+watch token file): 1 session changed (alice)")

	// A rotated token (a Secret mounted the same way): the old one no
	// longer opens alice's endpoint, the new one does.
	rotated := "alice-rotated-0123456789abcdef"
	configMapSwap(t, dir, "..v3", map[string]string{"wasmhost.json": mustJSON(t, cfg), "alice.token": rotated})
	r.waitLog("reload (watch config+watch token file): no session changed")
	require.Eventually(t, func() bool {
		_, err := r.dial("alice", aliceToken)
		return err != nil
	}, eventWithin, 20*time.Millisecond, "the old token still works")
	r.connect("alice", rotated)
}

func TestWatchSymlinkToAnotherDirectory(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	linkDir, realDir := t.TempDir(), t.TempDir()
	real := filepath.Join(realDir, "real.json")
	cfg := baseConfig()
	writeConfig(t, real, cfg)
	link := filepath.Join(linkDir, "wasmhost.json")
	require.NoError(t, os.Symlink(real, link))
	r := start(t, baseConfig(), at(link))
	alice := r.connect("alice", aliceToken)

	// Edited where it really is: nothing happens in the link's directory.
	writeConfig(t, real, set(cfg, "sessions.alice.overrides.demo.includeTools", []string{"echo"}))
	alice.waitChanged(t)
	require.Equal(t, []string{"demo__echo"}, alice.tools(t))

	// Pointed elsewhere: only the link's directory sees it.
	other := filepath.Join(realDir, "other.json")
	writeConfig(t, other, set(cfg, "sessions.alice.overrides.demo.includeTools", []string{"add"}))
	require.NoError(t, os.Symlink(other, link+".new"))
	require.NoError(t, os.Rename(link+".new", link))
	// The first edit's reload may have sent more than one list_changed
	// (seen under load): the one waited for may be stale, so the list is
	// waited for too.
	alice.waitChanged(t)
	waitFor(t, eventWithin, func() bool { return slices.Equal(alice.tools(t), []string{"demo__add"}) },
		r.logs.String, "alice's tools to be demo__add after the link was pointed elsewhere")
}

func TestWatchTokenFileRewrittenInPlace(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "alice.token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(aliceToken+"\n"), 0o600))
	r := start(t, set(baseConfig(), "sessions.alice", map[string]any{"tokenFile": tokenFile}))
	r.connect("alice", aliceToken)

	rotated := "alice-rotated-0123456789abcdef"
	require.NoError(t, os.WriteFile(tokenFile, []byte(rotated+"\n"), 0o600))
	r.waitLog("reload (watch token file)")
	_, err := r.dial("alice", aliceToken)
	require.Error(t, err, "the old token still opens alice's endpoint")
	r.connect("alice", rotated)
}

func TestWatchIgnoresOtherFiles(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	// A token file in a directory of its own: touching it, after the
	// other files, marks the point by which the watcher has taken in
	// their events (it reads them in order), and its reload names it
	// alone unless they asked for one too.
	tokenFile := filepath.Join(t.TempDir(), "alice.token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(aliceToken+"\n"), 0o600))
	r := start(t, set(baseConfig(), "sessions.alice", map[string]any{"tokenFile": tokenFile}))
	dir := filepath.Dir(r.path)
	for i := range 5 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte{byte(i)}, 0o600))
		require.NoError(t, os.Rename(filepath.Join(dir, "notes.txt"), filepath.Join(dir, "notes.bak")))
	}
	later := time.Now().Add(time.Second)
	require.NoError(t, os.Chtimes(tokenFile, later, later))
	r.waitLog("watch token file") // its reload, alone or not
	require.Equal(t, 1, r.countLog("reload ("), "reloads in the logs:\n%s", r.logs)
	require.Equal(t, 1, r.countLog("reload (watch token file): no session changed"), "reloads in the logs:\n%s", r.logs)

	// Touching the config counts as a change.
	now := time.Now().Add(time.Second)
	require.NoError(t, os.Chtimes(r.path, now, now))
	r.waitLog("reload (watch config): no session changed")
}

// A chain of links: the config's name links to a second link in another
// directory, which is re-pointed there.
func TestWatchSymlinkChain(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	first, middle, last := t.TempDir(), t.TempDir(), t.TempDir()
	cfg := baseConfig()
	writeConfig(t, filepath.Join(last, "a.json"), cfg)
	writeConfig(t, filepath.Join(last, "b.json"), set(cfg, "sessions.alice.overrides.demo.includeTools", []string{"echo"}))
	hop := filepath.Join(middle, "current.json")
	require.NoError(t, os.Symlink(filepath.Join(last, "a.json"), hop))
	link := filepath.Join(first, "wasmhost.json")
	require.NoError(t, os.Symlink(hop, link))
	r := start(t, baseConfig(), at(link))
	alice := r.connect("alice", aliceToken)

	require.NoError(t, os.Symlink(filepath.Join(last, "b.json"), hop+".new"))
	require.NoError(t, os.Rename(hop+".new", hop))
	alice.waitChanged(t)
	require.Equal(t, []string{"demo__echo"}, alice.tools(t))
}

// TestWatchTokenFileAddedByReload: a reload that brings a token file in a
// directory the watcher did not watch yet watches it at once, not only
// after some other event: rotating that token reloads.
func TestWatchTokenFileAddedByReload(t *testing.T) {
	t.Parallel()
	r := start(t, baseConfig())
	tokenFile := filepath.Join(t.TempDir(), "alice.token") // not the config's directory
	require.NoError(t, os.WriteFile(tokenFile, []byte(aliceToken+"\n"), 0o600))
	cfg := baseConfig()
	delete(cfg["sessions"].(map[string]any)["alice"].(map[string]any), "token")
	set(cfg, "sessions.alice.tokenFile", tokenFile)
	writeConfig(t, r.path, cfg)
	r.waitLog("reload (watch config)")
	r.connect("alice", aliceToken)

	rotated := "alice-rotated-0123456789abcdef"
	require.NoError(t, os.WriteFile(tokenFile, []byte(rotated+"\n"), 0o600))
	r.waitLog("reload (watch token file)")
	r.connect("alice", rotated)
}

// TestWatchRecreatedDirectory: a token file's directory removed, then made
// again with a new token in it, reloads with the new token: the watch of a
// directory that went away comes back when the directory does.
func TestWatchRecreatedDirectory(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	dir := filepath.Join(t.TempDir(), "secrets")
	require.NoError(t, os.Mkdir(dir, 0o700))
	tokenFile := filepath.Join(dir, "alice.token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(aliceToken+"\n"), 0o600))
	r := start(t, set(baseConfig(), "sessions.alice", map[string]any{"tokenFile": tokenFile}))
	r.connect("alice", aliceToken)

	require.NoError(t, os.RemoveAll(dir))
	r.waitLog("reload refused") // the token file is missing
	r.waitWatching(filepath.Dir(dir))
	require.NoError(t, os.Mkdir(dir, 0o700))
	rotated := "alice-rotated-0123456789abcdef"
	require.NoError(t, os.WriteFile(tokenFile, []byte(rotated+"\n"), 0o600))
	r.waitLog("reload (watch token file): no session changed")
	r.connect("alice", rotated)
}

// TestWatchMissingFileIgnoresOtherEvents: while a token file is missing
// (its reload refused), a chmod of another file in its directory asks for
// no reload: only a change of the token file does.
func TestWatchMissingFileIgnoresOtherEvents(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "alice.token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(aliceToken+"\n"), 0o600))
	other := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(other, nil, 0o600))
	r := start(t, set(baseConfig(), "sessions.alice", map[string]any{"tokenFile": tokenFile}))

	require.NoError(t, os.Remove(tokenFile))
	r.waitLog("reload refused")
	require.Equal(t, 1, r.countLog("reload refused"), "logs:\n%s", r.logs)
	for i := range 3 {
		require.NoError(t, os.Chmod(other, os.FileMode(0o600|i<<3)))
	}
	// Touching the config marks the point by which the watcher has taken
	// in the chmods (it reads events in order): the one reload refused
	// since is the config's alone, not one of the token file's, nor one
	// naming both.
	later := time.Now().Add(time.Second)
	require.NoError(t, os.Chtimes(r.path, later, later))
	r.waitLog("watch config") // its reload, alone or not
	require.Equal(t, 2, r.countLog("reload refused"), "reloads after a chmod of another file:\n%s", r.logs)
	require.Equal(t, 1, r.countLog(`trigger="watch token file"`), "reloads after a chmod of another file:\n%s", r.logs)
	require.Equal(t, 1, r.countLog(`trigger="watch config"`), "reloads after a chmod of another file:\n%s", r.logs)
}

// TestWatchFileARefusedReloadWaitsFor: a reload refused because a token
// file it names does not exist yet (a Secret mounted after its ConfigMap)
// is tried again when the file appears, even in a directory the running
// config never named.
func TestWatchFileARefusedReloadWaitsFor(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg)
	r.connect("alice", aliceToken)
	secrets := filepath.Join(t.TempDir(), "secrets")
	tokenFile := filepath.Join(secrets, "alice.token")
	writeConfig(t, r.path, set(cfg, "sessions.alice", map[string]any{"tokenFile": tokenFile}))
	r.waitLog("reload refused")
	r.waitWatching(filepath.Dir(secrets)) // the nearest directory of the missing file's that exists

	rotated := "alice-rotated-0123456789abcdef"
	require.NoError(t, os.MkdirAll(secrets, 0o700))
	require.NoError(t, os.WriteFile(tokenFile, []byte(rotated), 0o600))
	r.waitLog("reload (watch token file): 1 session changed (alice)")
	r.connect("alice", rotated)
}
