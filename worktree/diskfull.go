package worktree

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// minFree is the free space under which a file system counts as full when
// a write to it failed: git reports a full disk in words of its own
// ("unable to write file", "cannot update", "Could not reset index file")
// that do not always say so.
const minFree = 1 << 20

// diskFull returns an error wrapping ErrNoSpace that names the file system
// holding the first of paths with less than minFree bytes available to
// the daemon's user, or nil when each has room or cannot be examined. A
// path that does not exist yet is looked up by its nearest existing
// parent.
func diskFull(paths ...string) error {
	for _, p := range paths {
		dir := existingParent(p)
		var st syscall.Statfs_t
		if dir == "" || syscall.Statfs(dir, &st) != nil {
			continue
		}
		free := st.Bavail * uint64(st.Bsize)
		if free >= minFree {
			continue
		}
		return fmt.Errorf("the disk holding %s (the file system mounted at %s) is full, %d KiB free: %w",
			p, mountPoint(dir), free>>10, ErrNoSpace)
	}
	return nil
}

// existingParent returns path or its nearest ancestor that exists, or ""
// when path is not absolute.
func existingParent(path string) string {
	if !filepath.IsAbs(path) {
		return ""
	}
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil || !errors.Is(err, os.ErrNotExist) || p == "/" {
			return p
		}
	}
}

// mountPoint returns the top directory of the file system holding dir: its
// highest ancestor on the same device.
func mountPoint(dir string) string {
	var st syscall.Stat_t
	if syscall.Stat(dir, &st) != nil {
		return dir
	}
	for {
		parent := filepath.Dir(dir)
		var pst syscall.Stat_t
		if parent == dir || syscall.Stat(parent, &pst) != nil || pst.Dev != st.Dev {
			return dir
		}
		dir = parent
	}
}
