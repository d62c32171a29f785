package acpfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// plainPath reports whether rel, cleaned and relative, names an existing
// path beneath dir with no symlink on it, in one openat2 call: then rel is
// its own resolution and the component walk can be skipped. Any failure
// (a symlink, a missing part, an old kernel) answers false.
func plainPath(dir *os.File, rel string) bool {
	rc, err := dir.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	// Control keeps dir's descriptor from being closed while it is used.
	err = rc.Control(func(dirfd uintptr) {
		fd, err := unix.Openat2(int(dirfd), rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err == nil {
			unix.Close(fd)
			ok = true
		}
	})
	return err == nil && ok
}
