package httpapi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentpool/agentpool/pool"
)

// diskPather is an error that names the file a full disk refused (the
// store's SQLITE_FULL names its database this way).
type diskPather interface {
	DiskPath() string
}

// isStorageFull reports whether err says a disk is full: ENOSPC from a file
// write, SQLite or git (pool.ErrStorageFull), or a disk quota exceeded.
func isStorageFull(err error) bool {
	return errors.Is(err, pool.ErrStorageFull) || errors.Is(err, syscall.EDQUOT)
}

// storageFullMessage is the message of a 507: which file system is full
// (the file the write failed on, and the mount point of the file system
// holding it, with its free space), then err's own message.
func storageFullMessage(err error, msg string) string {
	what := "the disk holding the daemon's data or the session's repository is full"
	switch p := fullPath(err); {
	case strings.Contains(msg, "the file system mounted at"):
		what = "a disk is full" // msg names it
	case p != "":
		what = strings.TrimSpace(fmt.Sprintf("the disk holding %s %s", p, describeFS(p))) + " is full"
	}
	if errors.Is(err, syscall.EDQUOT) {
		what += " (the disk quota of the daemon's user is used up)"
	}
	return what + "; free space and retry (nothing acknowledged was lost): " + msg
}

// fullPath returns the file that err says could not be written, or "".
func fullPath(err error) string {
	var dp diskPather
	if errors.As(err, &dp) {
		return dp.DiskPath()
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && filepath.IsAbs(pe.Path) {
		return pe.Path
	}
	var le *os.LinkError
	if errors.As(err, &le) && filepath.IsAbs(le.New) {
		return le.New
	}
	return ""
}

// describeFS names the file system holding path: "(the file system mounted
// at /data, 12 KiB free)", or "" when it cannot be examined.
func describeFS(path string) string {
	dir := path
	for {
		if _, err := os.Stat(dir); err == nil || dir == "/" || dir == "." {
			break
		}
		dir = filepath.Dir(dir)
	}
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return ""
	}
	return fmt.Sprintf("(the file system mounted at %s, %d KiB free)", mountPoint(dir), st.Bavail*uint64(st.Bsize)>>10)
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
