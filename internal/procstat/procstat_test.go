package procstat

import (
	"os"
	"slices"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	// A command name with spaces and parentheses, as a process may set;
	// utime 1 and stime 2 ticks, rss 250 pages.
	line := []byte("4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123 4096000 250 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
	p, ok := Parse(line)
	want := Proc{PPID: 17, CPU: 30 * time.Millisecond, RSS: 250 * pageSize}
	if !ok || p != want {
		t.Fatalf("Parse = %+v, %v; want %+v", p, ok, want)
	}
	if _, ok := Parse([]byte("1 (x) S 0")); ok {
		t.Fatal("a short line parsed")
	}
}

func TestDescendants(t *testing.T) {
	procs := map[int]Proc{
		1:  {PPID: 0},
		10: {PPID: 1},
		11: {PPID: 10},
		12: {PPID: 11},
		13: {PPID: 10},
		20: {PPID: 1}, // a sibling: not below 10
	}
	got := Descendants(procs, 10)
	slices.Sort(got)
	if !slices.Equal(got, []int{11, 12, 13}) {
		t.Errorf("Descendants(10) = %v, want [11 12 13]", got)
	}
	got = Children(procs, 10)
	slices.Sort(got)
	if !slices.Equal(got, []int{11, 13}) {
		t.Errorf("Children(10) = %v, want [11 13]", got)
	}
}

// TestReadSelf: Read finds this process, under its parent, having spent
// some CPU time.
func TestReadSelf(t *testing.T) {
	procs, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	me, ok := procs[os.Getpid()]
	if !ok {
		t.Fatalf("pid %d not read", os.Getpid())
	}
	if me.PPID != os.Getppid() || me.RSS <= 0 {
		t.Errorf("this process: %+v, want parent %d and a resident size", me, os.Getppid())
	}
}
