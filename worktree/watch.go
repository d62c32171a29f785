package worktree

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Checkpoints of an unchanged worktree are answered without running git: a
// changeTracker watches every directory of a checkpointed worktree through
// one inotify instance and knows whether anything happened in it since its
// last checkpoint. It reads the inotify queue only when asked (no
// goroutine): reading it to the end is the barrier that makes "no event"
// mean "no change until now", because the kernel queues an event when the
// change is made. Whatever it cannot vouch for is scanned: a queue overflow,
// a directory that moved, a watch limit reached, an inotify that is not
// available, a change of the git files that decide what a snapshot holds
// (the fingerprint), or a last scan older than the trust age.

const (
	// watchMask is what a watched directory reports: every change of an
	// entry's content, metadata or name, and the directory's own end.
	watchMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE |
		unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
		unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW
	// maxTreeDirs bounds the watches of one worktree; a bigger one is
	// always scanned.
	maxTreeDirs = 32768
	// readBufSize holds many events per read(2).
	readBufSize = 64 << 10
)

// errTooManyDirs says a worktree has more directories than maxTreeDirs.
var errTooManyDirs = errors.New("too many directories to watch")

// changeTracker tracks, per worktree, whether it may have changed since the
// checkpoint recorded for it. Its zero value is not usable: see
// newChangeTracker.
type changeTracker struct {
	log      *slog.Logger
	maxAge   time.Duration // <0: never trust, always scan
	now      func() time.Time
	maxDirs  int
	mu       sync.Mutex
	fd       int   // the inotify instance; -1 before first use and after close
	initErr  error // why inotify cannot be used, once it failed
	closed   bool
	buf      []byte
	byWD     map[int32]*watchedTree
	trees    map[string]*watchedTree // by worktree path
	overflow int64                   // queue overflows seen
}

// watchedTree is one tracked worktree.
type watchedTree struct {
	root  string
	dirs  map[int32]string // watch descriptor → directory
	valid bool             // every directory is watched where it is
	skip  error            // why it is not tracked (never cached)
	gen   uint64           // bumped by every event in the tree
	attrs bool             // a .gitattributes file was seen by the last walk

	cp   string // tree of the last recorded checkpoint, "" for none
	cpG  uint64 // gen when the scan of cp began
	cpFP fingerprint
	cpAt time.Time
}

// fingerprint is the state of the git files outside the worktree that
// decide what a snapshot holds: the worktree's index (tracked ignored
// files), the repository's info/exclude and config (core.excludesFile),
// and the user's global ignore file and config.
type fingerprint [5]fileStamp

// fileStamp identifies one version of a file; the zero value is "missing".
type fileStamp struct {
	ino, size, mtime, ctime int64
}

func stamp(path string) fileStamp {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileStamp{}
	}
	return fileStamp{ino: int64(st.Ino), size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

func newChangeTracker(log *slog.Logger, maxAge time.Duration) *changeTracker {
	return &changeTracker{
		log:     log,
		maxAge:  maxAge,
		now:     time.Now,
		maxDirs: maxTreeDirs,
		fd:      -1,
		byWD:    make(map[int32]*watchedTree),
		trees:   make(map[string]*watchedTree),
	}
}

// lookup returns the tree recorded for the worktree at root when nothing
// has changed in it since the scan that made it, and fp is unchanged.
func (c *changeTracker) lookup(root string, fp fingerprint) (string, bool) {
	if c.maxAge < 0 {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trees[root]
	if t == nil || t.cp == "" {
		return "", false
	}
	c.drainLocked()
	if !t.valid || t.gen != t.cpG || t.cpFP != fp || c.now().Sub(t.cpAt) > c.maxAge {
		return "", false
	}
	return t.cp, true
}

// begin is called before a scan of the worktree at root: it makes sure
// every directory is watched and returns the generation the scan starts
// from, or false when the worktree cannot be tracked.
func (c *changeTracker) begin(root string) (uint64, bool) {
	if c.maxAge < 0 {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, false
	}
	if c.fd < 0 && c.initErr == nil {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			c.initErr = err
			c.log.Info("worktree change tracking unavailable; every checkpoint scans", keyErr, err)
		} else {
			c.fd = fd
			c.buf = make([]byte, readBufSize)
		}
	}
	if c.fd < 0 {
		return 0, false
	}
	c.drainLocked()
	t := c.trees[root]
	if t == nil {
		t = &watchedTree{root: root, dirs: make(map[int32]string)}
		c.trees[root] = t
	}
	if t.skip != nil {
		return 0, false
	}
	if !t.valid {
		if err := c.establishLocked(t); err != nil {
			t.skip = err
			c.unwatchLocked(t)
			c.log.Info("worktree not tracked; every checkpoint scans it", keyPath, root, keyErr, err)
			return 0, false
		}
		// Events from the walk itself are older than the scan to come.
		c.drainLocked()
		if !t.valid {
			return 0, false
		}
	}
	return t.gen, true
}

// record remembers tree as the checkpoint of the worktree at root whose
// scan began at generation gen with the git files at fp.
func (c *changeTracker) record(root string, gen uint64, tree string, fp fingerprint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.trees[root]; t != nil && t.valid {
		t.cp, t.cpG, t.cpFP, t.cpAt = tree, gen, fp, c.now()
	}
}

// sawAttributes reports whether the last walk of the worktree at root
// (the one begin made) met a .gitattributes file.
func (c *changeTracker) sawAttributes(root string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trees[root]
	return t == nil || t.attrs
}

// forget stops tracking the worktree at root.
func (c *changeTracker) forget(root string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.trees[root]; t != nil {
		c.unwatchLocked(t)
		delete(c.trees, root)
	}
}

// close releases the inotify instance; later checkpoints scan.
func (c *changeTracker) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for root := range c.trees {
		delete(c.trees, root)
	}
	clear(c.byWD)
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}

// establishLocked watches every directory of t anew.
func (c *changeTracker) establishLocked(t *watchedTree) error {
	c.unwatchLocked(t)
	t.gen++
	t.cp = ""
	t.attrs = false
	if err := c.watchTreeLocked(t, t.root); err != nil {
		return err
	}
	t.valid = true
	return nil
}

// watchTreeLocked adds a watch on dir and every directory under it,
// symlinks not followed; the worktree's own .git file is skipped. A
// directory that vanishes meanwhile is skipped: its parent reports it.
func (c *changeTracker) watchTreeLocked(t *watchedTree, dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != t.root {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			if d.Name() == ".gitattributes" {
				t.attrs = true
			}
			return nil
		}
		if len(t.dirs) >= c.maxDirs {
			return errTooManyDirs
		}
		wd, err := unix.InotifyAddWatch(c.fd, path, watchMask)
		switch {
		case errors.Is(err, unix.ENOENT) && path != t.root:
			return fs.SkipDir
		case err != nil:
			return &os.PathError{Op: "inotify_add_watch", Path: path, Err: err}
		}
		if prev := c.byWD[int32(wd)]; prev != nil && prev != t {
			// The same directory in two worktrees (a bind mount): trust neither.
			return errors.New("directory shared with another worktree: " + path)
		}
		t.dirs[int32(wd)] = path
		c.byWD[int32(wd)] = t
		return nil
	})
}

// unwatchLocked removes every watch of t.
func (c *changeTracker) unwatchLocked(t *watchedTree) {
	for wd := range t.dirs {
		if c.fd >= 0 {
			_, _ = unix.InotifyRmWatch(c.fd, uint32(wd))
		}
		delete(c.byWD, wd)
	}
	clear(t.dirs)
	t.valid = false
}

// drainLocked reads every queued event.
func (c *changeTracker) drainLocked() {
	if c.fd < 0 {
		return
	}
	for {
		n, err := unix.Read(c.fd, c.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) || n <= 0 {
			if err != nil && !errors.Is(err, unix.EAGAIN) {
				c.log.Warn("read worktree change events; tracked worktrees will be scanned", keyErr, err)
				c.invalidateAllLocked()
			}
			return
		}
		c.parseLocked(c.buf[:n])
	}
}

// parseLocked handles a buffer of inotify events.
func (c *changeTracker) parseLocked(b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:4]))
		mask := binary.NativeEndian.Uint32(b[4:8])
		nameLen := int(binary.NativeEndian.Uint32(b[12:16]))
		end := unix.SizeofInotifyEvent + nameLen
		if end > len(b) {
			c.invalidateAllLocked()
			return
		}
		name := b[unix.SizeofInotifyEvent:end]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		c.handleLocked(wd, mask, string(name))
		b = b[end:]
	}
}

// handleLocked applies one event.
func (c *changeTracker) handleLocked(wd int32, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		c.overflow++
		c.invalidateAllLocked()
		return
	}
	t := c.byWD[wd]
	if t == nil {
		return
	}
	t.gen++
	dir := t.dirs[wd]
	switch {
	case mask&unix.IN_IGNORED != 0:
		// The directory is gone (its parent reported it) or unwatched.
		delete(t.dirs, wd)
		delete(c.byWD, wd)
		if dir == t.root {
			t.valid = false
		}
	case mask&(unix.IN_MOVE_SELF|unix.IN_UNMOUNT) != 0 || (mask&unix.IN_DELETE_SELF != 0 && dir == t.root):
		// A moved directory keeps its watch under its old name: rewatch.
		t.valid = false
	case mask&unix.IN_ISDIR != 0 && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 && t.valid:
		if err := c.watchTreeLocked(t, filepath.Join(dir, name)); err != nil {
			t.valid = false
		}
	}
}

// invalidateAllLocked makes every tracked worktree be scanned and watched anew.
func (c *changeTracker) invalidateAllLocked() {
	for _, t := range c.trees {
		t.gen++
		t.valid = false
	}
}

// fingerprintOf stamps the git files that decide a snapshot of the worktree
// whose private and common git directories are admin and common.
func (m *Manager) fingerprintOf(admin, common string) fingerprint {
	return fingerprint{
		stamp(filepath.Join(admin, "index")),
		stamp(filepath.Join(common, "info", "exclude")),
		stamp(filepath.Join(common, "config")),
		stamp(m.globalIgnore),
		stamp(m.globalConfig),
	}
}

// globalGitFiles returns git's default global ignore file and the user's
// global config, from the environment git runs with.
func globalGitFiles(env []string) (ignore, config string) {
	get := func(k string) string {
		v := ""
		for _, kv := range env {
			if len(kv) > len(k) && kv[:len(k)] == k && kv[len(k)] == '=' {
				v = kv[len(k)+1:]
			}
		}
		return v
	}
	home, xdg := get("HOME"), get("XDG_CONFIG_HOME")
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	if xdg != "" {
		ignore = filepath.Join(xdg, "git", "ignore")
	}
	if cfg := get("GIT_CONFIG_GLOBAL"); cfg != "" {
		config = cfg
	} else if home != "" {
		config = filepath.Join(home, ".gitconfig")
	}
	return ignore, config
}
