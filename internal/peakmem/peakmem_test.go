package peakmem

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/procstat"
)

func TestTreeRSS(t *testing.T) {
	procs := map[int]procstat.Proc{
		1:  {PPID: 0, RSS: 1},
		10: {PPID: 1, RSS: 10},
		11: {PPID: 10, RSS: 100},
		12: {PPID: 11, RSS: 1000},
		20: {PPID: 1, RSS: 10000}, // a sibling: not in 10's tree
	}
	if got := treeRSS(procs, 10); got != 1110 {
		t.Fatalf("treeRSS(10) = %d, want 1110", got)
	}
}

// TestRunCountsChildren: the peak of a shell that starts a child holding
// memory counts the child, and Run returns the command's exit status.
func TestRunCountsChildren(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The child holds its memory until a sample has counted it: the
	// hook removes the file the child waits on.
	hold := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	sampled = func(peak int64) {
		if peak >= 64<<20 {
			once.Do(func() { _ = os.Remove(hold) })
		}
	}
	t.Cleanup(func() { sampled = nil })
	cmd := exec.Command("/bin/sh", "-c", `"$0" -test.run '^TestHold$' >/dev/null; exit 3`, self)
	cmd.Env = append(os.Environ(), "PEAKMEM_HOLD="+hold)
	peak, err := Run(context.Background(), cmd, 20*time.Millisecond)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("Run error %v, want exit status 3", err)
	}
	if peak < 64<<20 {
		t.Fatalf("peak %s, want at least the child's 64 MiB", Format(peak))
	}
}

// TestHold is the child of TestRunCountsChildren: it touches 64 MiB and
// holds them until its parent's sampler has counted them.
func TestHold(t *testing.T) {
	hold := os.Getenv("PEAKMEM_HOLD")
	if hold == "" {
		t.Skip("the child of TestRunCountsChildren")
	}
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = 1
	}
	// Held until the parent's sampler has counted it and removed hold
	// (the test's own deadline bounds the wait).
	for {
		if _, err := os.Stat(hold); errors.Is(err, fs.ErrNotExist) {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling a file, not a timing assumption
	}
	_ = b[len(b)-1]
}
