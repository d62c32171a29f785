package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// View is what a program sees when it runs in namespaces of its own (new
// user, mount, PID, IPC, UTS and network namespaces): the system
// directories read-only, the Policy's Read paths read-only and its Write
// paths read-write at the paths they have outside, a private /tmp, a
// minimal /dev, its own /proc, and nothing else — no /run/user, no X11 or
// D-Bus socket, no other user's files, no home but the granted paths in
// it. Unix sockets outside the view are unreachable because the view does
// not show them (abstract ones belong to the network namespace), except
// Sockets. The network namespace has only its own loopback; Egress is the
// way out.
type View struct {
	// Tmp is the session's private TMPDIR, shown at its own path (the
	// view's /tmp and /var/tmp are its own, in memory).
	Tmp string `json:"tmp,omitempty"`
	// Home is made as an empty directory: the granted paths inside it are
	// all that shows, and a write anywhere else in it is refused with
	// EACCES, as in a home directory the program may not write (its
	// directories are not writable, and the program has no capability),
	// or EROFS where no Landlock rule would refuse it too. A program that
	// saves a granted file by writing a temporary file beside it falls
	// back to writing the file in place on EACCES, never on EROFS
	// (claude-code and ~/.claude.json).
	Home string `json:"home,omitempty"`
	// Sockets are unix sockets (or directories of them) shown read-write:
	// the provider's "sandbox.sockets".
	Sockets []string `json:"sockets,omitempty"`
	// Hide are files shown empty (the system's password hashes: a root
	// daemon's agents run as uid 0, without capabilities, and would
	// otherwise read them as their owner).
	Hide []string `json:"hide,omitempty"`
	// Git is the session's private git view; nil without one.
	Git *GitMounts `json:"git,omitempty"`
	// Egress is the way out of the network namespace; nil for none.
	Egress *EgressView `json:"egress,omitempty"`
}

// GitMounts are the mounts of a session's private git view: an overlay
// on the shared object store and the session's own ref and reflog
// directories, over a read-only common git directory.
type GitMounts struct {
	// Objects is CommonDir/objects; Refs and Logs are the branch's ref
	// and reflog directories in CommonDir.
	Objects, Refs, Logs string
	// View holds the directories mounted there.
	View GitView
}

// EgressView is how a program in its own network namespace reaches out:
// the launcher listens on loopback inside the namespace and relays each
// connection to the daemon's egress proxy on a unix socket.
type EgressView struct {
	// Socket is the proxy's unix socket for this launch (outside path).
	Socket string `json:"socket"`
	// Port is the proxy's port on loopback inside the namespace.
	Port uint16 `json:"port"`
	// Forward lists loopback ports that answer inside the namespace as
	// the listed address does outside (a local model server): each
	// connection is relayed through the proxy to Target.
	Forward []Forward `json:"forward,omitempty"`
	// Network is the network mode the proxy enforces
	// (backends.NetworkAll or NetworkList), which Jail.Describe reports:
	// the policy's is Landlock's, "all" for a list that names hosts.
	Network string `json:"network,omitempty"`
}

// Forward is one loopback port forwarded into a network namespace.
type Forward struct {
	// Port is the port on 127.0.0.1 inside the namespace.
	Port uint16 `json:"port"`
	// Target is the "host:port" the proxy connects to.
	Target string `json:"target"`
}

// EgressProxyPort is the egress proxy's port on loopback inside an
// agent's network namespace (HTTP CONNECT, plain HTTP and SOCKS5).
const EgressProxyPort = 3128

// Places inside a view.
const (
	// viewEgressSocket is where the egress socket is shown in the view.
	viewEgressSocket = "/run/agentpool/egress.sock"
	// oldRoot is where the outside's root stays while the view is built.
	oldRoot = "/.oldroot"
	// viewBase is the directory the view's tmpfs is mounted on before it
	// becomes the root.
	viewBase = "/tmp"
)

// viewSystem are the system directories shown read-only when they exist.
var viewSystem = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
	"/nix/store", "/snap", "/run/systemd/resolve",
}

// viewTmpSize bounds each of the view's in-memory /tmp and /var/tmp, as
// a share of the machine's memory.
const viewTmpSize = "10%"

// viewDevices are the device files shown in the view's /dev.
var viewDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// viewSpecial are the directories the view makes itself, which no grant
// binds (nor anything beneath them). Paths beneath /tmp may be granted:
// their mount points are made in the view's own /tmp, and the rest of
// the outside's /tmp does not show.
var viewSpecial = []string{"/proc", "/dev", "/sys"}

// mountFlags of the view's binds.
const (
	attrRO = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	attrRW = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
)

// buildView makes the calling process's mount namespace show only what p
// and v grant, then makes it the root. It runs in the launcher, first
// process of new user, mount and PID namespaces, with CAP_SYS_ADMIN in
// them, before the Landlock rules apply.
func buildView(p Policy, v *View) error {
	// What to show is decided on the outside, before the pivot: a source
	// path's directories are resolved there (an absolute symlink such as
	// /var/run -> /run means the outside's).
	b := &viewBuilder{}
	for _, dir := range viewSystem {
		b.add(dir, dir, attrRO)
	}
	if v.Home != "" {
		b.mounts = append(b.mounts, viewMount{dst: v.Home, kind: mountHome})
	}
	git := v.Git
	for _, path := range p.Read {
		if !isSpecial(path) {
			b.add(path, path, attrRO)
		}
	}
	for _, path := range p.Write {
		if isSpecial(path) {
			continue
		}
		if git != nil && (path == git.Objects || path == git.Refs || path == git.Logs) {
			continue
		}
		b.add(path, path, attrRW)
	}
	for _, s := range v.Sockets {
		b.add(s, s, attrRW)
	}
	if git != nil {
		b.add(git.View.Refs, git.Refs, attrRW)
		b.add(git.View.Logs, git.Logs, attrRW)
	}
	// A /tmp of its own, which its terminals share by joining its mount
	// namespace; the session's TMPDIR (v.Tmp, on disk, shared by the
	// session's agents) is a Write grant at its own path.
	b.tmpfs("/tmp")
	b.tmpfs("/var/tmp")
	if v.Egress != nil {
		b.add(v.Egress.Socket, viewEgressSocket, attrRW)
	}
	b.skeletons()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", viewBase, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mount the view's root: %w", err)
	}
	if err := os.Mkdir(viewBase+oldRoot, 0o700); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	if err := unix.PivotRoot(viewBase, viewBase+oldRoot); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	// Parents before children: a bind covers what was mounted beneath
	// its path before it.
	slices.SortStableFunc(b.mounts, func(x, y viewMount) int { return depth(x.dst) - depth(y.dst) })
	var done []viewMount
	for _, m := range b.mounts {
		if redundant(done, m) {
			continue
		}
		if err := m.do(); err != nil {
			return err
		}
		done = append(done, m)
	}
	if git != nil {
		if err := mountObjects(git); err != nil {
			return err
		}
	}
	// The directories leading to grants beneath /tmp are read-only: a
	// write there is refused, not kept in the agent's own /tmp. The
	// home's are not writable either: read-only too where no Landlock
	// rule will refuse a write in it.
	landlock := LandlockABI() > 0
	for _, m := range b.mounts {
		if m.kind == mountHome {
			if err := sealHome(m.dst); err != nil {
				return err
			}
		}
		if m.kind == mountSkeleton || m.kind == mountHome && !landlock {
			if err := unix.MountSetattr(-1, m.dst, unix.AT_SYMLINK_NOFOLLOW, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
				return fmt.Errorf("view: %s read-only: %w", m.dst, err)
			}
		}
	}
	if err := makeDev(); err != nil {
		return err
	}
	for _, f := range v.Hide {
		if err := hideFile(f); err != nil {
			return err
		}
	}
	// /proc is mounted while the outside's is still attached: the kernel
	// lets a user namespace mount a proc only where one is fully visible.
	if err := os.MkdirAll("/proc", 0o555); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if _, err := os.Stat(oldRoot + "/sys"); err == nil {
		if err := os.Mkdir("/sys", 0o555); err != nil {
			return fmt.Errorf("view: %w", err)
		}
		if err := bindTree(oldRoot+"/sys", "/sys", attrRO|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return err
		}
	}
	if err := unix.Unmount(oldRoot, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the outside: %w", err)
	}
	_ = os.Remove(oldRoot)
	// The view's own directories (the home, mount points) are read-only.
	if err := unix.MountSetattr(-1, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("view: make the root read-only: %w", err)
	}
	return nil
}

// isSpecial reports whether path is one the view makes itself, or lies
// inside one.
func isSpecial(path string) bool {
	for _, s := range viewSpecial {
		if isWithin(path, s) {
			return true
		}
	}
	return path == "/" || path == "/tmp" || path == "/var/tmp"
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

// viewBuilder collects the view's mounts.
type viewBuilder struct {
	mounts []viewMount
}

// viewMount is one mount of a view: a bind of src (an outside path) on
// dst, a tmpfs, or a symlink.
type viewMount struct {
	src, dst string
	attr     uint64
	kind     int
	dir      bool
}

const (
	mountBind = iota
	mountTmpfs
	mountLink
	// mountSkeleton is a tmpfs on a directory of /tmp that holds only the
	// way to grants beneath it, made read-only once they are mounted.
	mountSkeleton
	// mountHome is the home's own tmpfs, which holds only the way to the
	// grants beneath it: outside the view's read-only root, its
	// directories not writable (see sealHome and View.Home).
	mountHome
)

// skeletons adds a skeleton tmpfs on each directory of /tmp and /var/tmp
// that leads to a grant without being one.
func (b *viewBuilder) skeletons() {
	binds := map[string]bool{}
	for _, m := range b.mounts {
		if m.kind != mountTmpfs && m.kind != mountSkeleton {
			binds[m.dst] = true
		}
	}
	seen := map[string]bool{}
	for _, m := range slices.Clone(b.mounts) {
		for _, tmp := range []string{"/tmp", "/var/tmp"} {
			rest, ok := strings.CutPrefix(m.dst, tmp+"/")
			if !ok || !strings.Contains(rest, "/") {
				continue
			}
			top := tmp + "/" + rest[:strings.IndexByte(rest, '/')]
			if !binds[top] && !seen[top] {
				seen[top] = true
				b.mounts = append(b.mounts, viewMount{dst: top, kind: mountSkeleton})
			}
		}
	}
}

// add binds the outside path src on dst. src's directories are resolved
// now, on the outside; its last element is not (a symlink is shown as
// one). A src that does not exist is skipped.
func (b *viewBuilder) add(src, dst string, attr uint64) {
	for _, m := range b.mounts {
		if m.dst == dst && m.kind == mountBind {
			return
		}
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(src))
	if err != nil {
		return
	}
	src = filepath.Join(dir, filepath.Base(src))
	fi, err := os.Lstat(src)
	if err != nil {
		return
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return
		}
		b.mounts = append(b.mounts, viewMount{src: target, dst: dst, kind: mountLink})
		abs := target
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(filepath.Dir(dst), target)
		}
		// The link's target shows too, where it points.
		if len(b.mounts) < 4096 {
			b.add(abs, abs, attr)
		}
		return
	}
	b.mounts = append(b.mounts, viewMount{src: src, dst: dst, attr: attr, kind: mountBind, dir: fi.IsDir()})
}

// redundant reports whether m, a read-only bind of a path at the same
// path, would show nothing new: the nearest of the mounts done before it
// above its path is a read-only bind of a directory at its own path, whose
// whole tree (submounts included, read-only too) already shows m's. Each
// mount skipped saves the launch a mount (PATH's directories under /usr,
// a certificate file under /etc).
func redundant(done []viewMount, m viewMount) bool {
	if m.kind != mountBind || m.attr != attrRO || m.src != m.dst {
		return false
	}
	var near *viewMount
	for i := range done {
		d := &done[i]
		if d.dst != m.dst && isWithin(m.dst, d.dst) && (near == nil || depth(d.dst) >= depth(near.dst)) {
			near = d
		}
	}
	return near != nil && near.kind == mountBind && near.attr == attrRO && near.src == near.dst && near.dir
}

func (b *viewBuilder) tmpfs(dst string) {
	b.mounts = append(b.mounts, viewMount{dst: dst, kind: mountTmpfs})
}

func (m viewMount) do() error {
	switch m.kind {
	case mountTmpfs, mountSkeleton, mountHome:
		if err := makeParents(m.dst, true); err != nil {
			return err
		}
		// The agent's own /tmp is in memory: bounded, so that filling it
		// cannot take the machine's memory (TMPDIR, on disk, is where
		// large temporary files go).
		mode := "mode=1777,size=" + viewTmpSize
		if m.kind != mountTmpfs {
			mode = "mode=0755,size=1m"
		}
		if err := unix.Mount("tmpfs", m.dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, mode); err != nil {
			return fmt.Errorf("view: tmpfs on %s: %w", m.dst, err)
		}
		return nil
	case mountLink:
		if err := makeParents(m.dst, false); err != nil {
			return err
		}
		if _, err := os.Lstat(m.dst); err == nil {
			return nil
		}
		if err := os.Symlink(m.src, m.dst); err != nil {
			return fmt.Errorf("view: link %s: %w", m.dst, err)
		}
		return nil
	}
	if err := makeParents(m.dst, m.dir); err != nil {
		return err
	}
	if !m.dir {
		if _, err := os.Lstat(m.dst); err != nil {
			f, err := os.OpenFile(m.dst, os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("view: mount point %s: %w", m.dst, err)
			}
			_ = f.Close()
		}
	}
	return bindTree(oldRoot+m.src, m.dst, m.attr)
}

// sealHome makes the directories of the home's own tmpfs (the home and
// the ways to its grants, not the grants mounted on them) readable and
// searchable only, so that a program without capabilities is refused a
// write there with EACCES.
func sealHome(home string) error {
	root, err := os.Lstat(home)
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	dev := root.Sys().(*syscall.Stat_t).Dev
	return filepath.WalkDir(home, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("view: %w", err)
		}
		if !d.IsDir() {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("view: %w", err)
		}
		if fi.Sys().(*syscall.Stat_t).Dev != dev {
			return filepath.SkipDir // a grant mounted there
		}
		if err := os.Chmod(p, 0o555); err != nil {
			return fmt.Errorf("view: %w", err)
		}
		return nil
	})
}

// bindTree binds src on the existing dst, recursively, with attr on the
// whole tree.
func bindTree(src, dst string, attr uint64) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("view: bind %s: %w", dst, err)
	}
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW, &unix.MountAttr{Attr_set: attr}); err != nil {
		return fmt.Errorf("view: set attributes of %s: %w", dst, err)
	}
	return nil
}

// makeParents makes the directories leading to dst in the view (and dst
// itself when dir is set). A parent that is a symlink outside is made a
// symlink inside, and what it points to is made in its place: a path
// through /var/run reaches /run in the view as outside.
func makeParents(dst string, dir bool) error {
	parts := strings.Split(strings.Trim(filepath.Clean(dst), "/"), "/")
	if !dir {
		parts = parts[:len(parts)-1]
	}
	for hops := 0; hops < 40; hops++ {
		cur := "/"
		redo := false
		for i, part := range parts {
			next := filepath.Join(cur, part)
			fi, err := os.Lstat(next)
			if err == nil {
				if fi.Mode()&os.ModeSymlink != 0 {
					target, err := os.Readlink(next)
					if err != nil {
						return fmt.Errorf("view: %s: %w", next, err)
					}
					if !filepath.IsAbs(target) {
						target = filepath.Join(cur, target)
					}
					parts = append(strings.Split(strings.Trim(filepath.Clean(target), "/"), "/"), parts[i+1:]...)
					redo = true
					break
				}
				cur = next
				continue
			}
			if out, err := os.Lstat(oldRoot + next); err == nil && out.Mode()&os.ModeSymlink != 0 {
				target, err := os.Readlink(oldRoot + next)
				if err != nil {
					return fmt.Errorf("view: %s: %w", next, err)
				}
				if err := os.Symlink(target, next); err != nil {
					return fmt.Errorf("view: link %s: %w", next, err)
				}
				if !filepath.IsAbs(target) {
					target = filepath.Join(cur, target)
				}
				parts = append(strings.Split(strings.Trim(filepath.Clean(target), "/"), "/"), parts[i+1:]...)
				redo = true
				break
			}
			if err := os.Mkdir(next, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("view: mount point %s: %w", next, err)
			}
			cur = next
		}
		if !redo {
			return nil
		}
	}
	return fmt.Errorf("view: %s: too many symlinks", dst)
}

// mountObjects mounts the session's object overlay on the shared store:
// the agent's new objects land in the upper directory, and the shared
// store stays as it was whatever the agent writes.
func mountObjects(g *GitMounts) error {
	opts := "lowerdir=" + overlayEscape(oldRoot+g.Objects) +
		",upperdir=" + overlayEscape(oldRoot+g.View.ObjectsUpper) +
		",workdir=" + overlayEscape(oldRoot+g.View.ObjectsWork)
	if _, err := os.Stat(g.Objects); err != nil {
		return fmt.Errorf("view: git objects %s: %w", g.Objects, err)
	}
	// In a user namespace overlayfs keeps its attributes as user.*
	// extended attributes; kernels before 5.11 know no such option.
	err := unix.Mount("overlay", g.Objects, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts+",userxattr")
	if errors.Is(err, unix.EINVAL) {
		err = unix.Mount("overlay", g.Objects, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
	}
	if err != nil {
		return fmt.Errorf("view: overlay on %s: %w", g.Objects, err)
	}
	return nil
}

// overlayEscape escapes the characters overlayfs options give meaning to.
func overlayEscape(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`)
	return r.Replace(p)
}

// hideFile shows f empty: an empty read-only file is bound over a file,
// an empty read-only tmpfs mounted on a directory.
func hideFile(f string) error {
	fi, err := os.Lstat(f)
	if err != nil || fi.Mode()&os.ModeSymlink != 0 {
		return nil
	}
	if fi.IsDir() {
		if err := unix.Mount("tmpfs", f, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0500,size=4k"); err != nil {
			return fmt.Errorf("view: hide %s: %w", f, err)
		}
		return nil
	}
	if err := unix.Mount("/dev/null", f, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("view: hide %s: %w", f, err)
	}
	return nil
}

// makeDev makes the view's /dev: a tmpfs with the harmless devices bound
// from outside, a new devpts instance for the terminals made inside, and
// its own /dev/shm.
func makeDev() error {
	if err := os.MkdirAll("/dev", 0o755); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755"); err != nil {
		return fmt.Errorf("view: mount /dev: %w", err)
	}
	for _, d := range viewDevices {
		dst := "/dev/" + d
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return fmt.Errorf("view: %w", err)
		}
		_ = f.Close()
		if err := unix.Mount(oldRoot+dst, dst, "", unix.MS_BIND, ""); err != nil {
			if errors.Is(err, unix.ENOENT) {
				_ = os.Remove(dst)
				continue
			}
			return fmt.Errorf("view: bind %s: %w", dst, err)
		}
	}
	for _, d := range []string{"/dev/pts", "/dev/shm"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("view: %w", err)
		}
	}
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("view: mount /dev/pts: %w", err)
	}
	if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("view: mount /dev/shm: %w", err)
	}
	links := [][2]string{
		{"pts/ptmx", "/dev/ptmx"}, {"/proc/self/fd", "/dev/fd"},
		{"/proc/self/fd/0", "/dev/stdin"}, {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"},
	}
	for _, l := range links {
		if err := os.Symlink(l[0], l[1]); err != nil {
			return fmt.Errorf("view: %w", err)
		}
	}
	return nil
}
