//go:build unix

package host

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// cacheDirTrusted refuses a cache directory another user owns, that others
// may write, or that its group may write when that is not this process's
// group (a group of the user's own, as a umask of 002 gives, is fine).
func cacheDirTrusted(fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	perm := fi.Mode().Perm()
	switch {
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("owned by user %d, not this process's (%d)", st.Uid, os.Geteuid())
	case perm&0o002 != 0:
		return fmt.Errorf("every user may write it (mode %v)", perm)
	case perm&0o020 != 0 && int(st.Gid) != os.Getegid():
		return fmt.Errorf("group %d may write it (mode %v), not this process's group (%d)", st.Gid, perm, os.Getegid())
	}
	return nil
}
