package daemon

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// startWatcher requests a reload when a file the running config depends on
// changes: the config file, the policy plugin, or a token file; and, after
// a refused reload, when a file that reload read or tried to read changes
// (the token file it found missing appears, say).
//
// A watch on a file's name is not enough in the deployments operators use.
// Editors and tools replace files by renaming over them, and Kubernetes
// updates a mounted ConfigMap or Secret by swapping a "..data" symlink in
// the mount's directory, so the file's own name never sees an event. A
// file that is a symlink changes where it points, or changes in the
// directory it points into. So the watcher watches the directory of each
// file's name, of every link it leads through, and of what it resolves to
// (or, for a directory that does not exist, its nearest existing parent),
// again after each reload (a reload may name other files:
// Daemon.retarget), and on any event in them
// compares each file's identity, size and modification time (through its
// symlinks) with what it saw last; a file that differs, appears or
// disappears requests a reload. Events that change none of the files, such
// as other files written in the same directory, reload nothing.
//
// The goroutine it starts ends with ctx.
func (d *Daemon) startWatcher(ctx context.Context, wg *sync.WaitGroup) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	fw := &fileWatch{d: d, w: w, dirs: make(map[string]bool), failed: make(map[string]bool), seen: make(map[string]os.FileInfo)}
	fw.refresh(false, "")
	wg.Go(func() {
		defer w.Close()
		for {
			var named string // the file an event named, other than by a chmod
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				name := filepath.Clean(ev.Name)
				if ev.Op != fsnotify.Chmod {
					named = name
				}
				if fw.dirs[name] && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
					// A watched directory went away; its watch went
					// with it, so refresh watches it again if it
					// comes back.
					delete(fw.dirs, name)
				}
			case <-d.retarget:
				// A reload changed the running config: the files it
				// depends on may be others, in other directories, which
				// must be watched now, not after the next event in a
				// directory watched already.
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				d.log.Warn("file watcher", "err", err)
			}
			fw.refresh(true, named)
		}
	})
	return nil
}

// A fileWatch is the state of startWatcher's goroutine.
type fileWatch struct {
	d      *Daemon
	w      *fsnotify.Watcher
	dirs   map[string]bool        // directories watched
	failed map[string]bool        // directories that could not be watched, warned about once
	seen   map[string]os.FileInfo // the files' last stamps, by name (nil: could not be read)
}

// sameStamp reports whether a and b, two stamps of one file (nil: it could
// not be read), tell of the same file: its identity, size and time.
func sameStamp(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// targets returns the files the running config depends on, by absolute
// name, each with what it is ("config", "policy", "token file").
func (fw *fileWatch) targets() map[string]string {
	t := map[string]string{fw.d.path: "config"}
	fw.d.mu.Lock()
	refused := fw.d.refusedFiles
	fw.d.mu.Unlock()
	for name, what := range refused {
		if p, err := filepath.Abs(name); err == nil {
			t[p] = what
		}
	}
	cfg := fw.d.runningConfig()
	if cfg == nil {
		return t
	}
	if cfg.Policy.Path != "" {
		if p, err := filepath.Abs(cfg.Policy.Path); err == nil {
			t[p] = "policy"
		}
	}
	for _, f := range cfg.TokenFiles() {
		if p, err := filepath.Abs(f); err == nil {
			t[p] = "token file"
		}
	}
	return t
}

// refresh stamps every target, requests a reload for those that changed
// since the last stamp when reload is set, and brings the set of watched
// directories in line with the targets. A target that named, the file an
// event named, is or resolves to counts as changed whatever its stamp:
// file times are coarse, so a file written twice in place within a few
// milliseconds can keep its stamp.
func (fw *fileWatch) refresh(reload bool, named string) {
	targets := fw.targets()
	want := make(map[string]bool)
	resolved := make(map[string]string) // by target, what it resolves to ("" when it does not)
	for name := range targets {
		for _, dir := range linkDirs(name) {
			want[dir] = true
		}
		if r, err := filepath.EvalSymlinks(name); err == nil {
			want[filepath.Dir(r)] = true
			resolved[name] = r
		}
	}
	// A directory that does not exist (removed, or not made yet) cannot
	// be watched: its nearest existing ancestor is, so that the event of
	// its making brings the watch of it back.
	for dir := range want {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			delete(want, dir)
			want[existingAncestor(dir)] = true
		}
	}
	for dir := range fw.dirs {
		if !want[dir] {
			_ = fw.w.Remove(dir) // it may be gone already
			delete(fw.dirs, dir)
		}
	}
	for dir := range want {
		if fw.dirs[dir] {
			continue
		}
		if err := fw.w.Add(dir); err != nil {
			if !fw.failed[dir] {
				fw.d.log.Warn("cannot watch directory", "dir", dir, "err", err)
				fw.failed[dir] = true
			}
			continue
		}
		fw.dirs[dir] = true
		delete(fw.failed, dir)
		fw.d.log.Debug("watching directory", "dir", dir)
	}
	// The files are stamped once their directories are watched: a file
	// made after its stamp has an event coming, one made before is seen
	// by the stamp. (Stamped first, a token file written into a directory
	// just made, between its stamp and its directory's watch, was never
	// reloaded.)
	var changed []string
	for name, what := range targets {
		st, err := os.Stat(name)
		if err != nil {
			st = nil
		}
		// named and resolved are both "" for a chmod event and a missing
		// file: that is no match.
		if old, ok := fw.seen[name]; ok && (!sameStamp(old, st) || named != "" && (named == name || named == resolved[name])) {
			fw.d.log.Debug("file changed", "file", name)
			if source := "watch " + what; !slices.Contains(changed, source) {
				changed = append(changed, source)
			}
		}
		fw.seen[name] = st
	}
	for name := range fw.seen {
		if _, ok := targets[name]; !ok {
			delete(fw.seen, name)
		}
	}
	if reload && len(changed) > 0 {
		slices.Sort(changed)
		fw.d.requestReload(strings.Join(changed, "+"))
	}
}

// linkDirs returns the directory of name and, when name is a symlink, of
// each link it leads through, in order: re-pointing any of them changes
// the file name stands for.
func linkDirs(name string) []string {
	dirs := []string{filepath.Dir(name)}
	for range 40 { // as the kernel's limit on links followed
		fi, err := os.Lstat(name)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			break
		}
		target, err := os.Readlink(name)
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(name), target)
		}
		name = target
		dirs = append(dirs, filepath.Dir(name))
	}
	return dirs
}

// existingAncestor returns the nearest directory above dir that exists
// (the root at worst).
func existingAncestor(dir string) string {
	for {
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		if _, err := os.Stat(parent); err == nil {
			return parent
		}
		dir = parent
	}
}
