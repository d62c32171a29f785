package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of cgroup operations.
const (
	// killWait bounds how long Kill waits for a cgroup to empty.
	killWait = 3 * time.Second
	// killPoll is the interval at which cgroup.events is read while waiting.
	killPoll = 2 * time.Millisecond
)

// cgroupMounts returns the mount points of the cgroup v2 hierarchy, with
// the root of each mount inside the hierarchy, from /proc/self/mountinfo.
func cgroupMounts() (mounts []cgroupMount, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superopts
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 || qf[0] != "cgroup2" {
			continue
		}
		mounts = append(mounts, cgroupMount{root: unescapeMount(pf[3]), point: unescapeMount(pf[4])})
	}
	return mounts, sc.Err()
}

type cgroupMount struct{ root, point string }

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroup returns the daemon's cgroup v2 path ("0::/path" of
// /proc/self/cgroup).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("no cgroup v2 membership in /proc/self/cgroup")
}

// candidateParents lists, best first, the directories where the daemon's
// cgroup tree may be created: its own cgroup, then each ancestor up to the
// nearest delegated user@UID.service (or the mount's root).
func candidateParents() []string {
	mounts, err := cgroupMounts()
	if err != nil || len(mounts) == 0 {
		return nil
	}
	own, err := ownCgroup()
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range mounts {
		rel, ok := strings.CutPrefix(own, m.root)
		if !ok {
			continue
		}
		dir := filepath.Join(m.point, rel)
		for {
			out = append(out, dir)
			if dir == m.point || strings.HasPrefix(filepath.Base(dir), "user@") {
				break
			}
			dir = filepath.Dir(dir)
		}
	}
	return out
}

// usable reports whether processes can be started in a new child of dir:
// it creates dir/name (if missing) and starts /bin/true directly inside a
// child of it. On success it returns the created tree's path.
func usable(parent, name string) (string, error) {
	root := filepath.Join(parent, name)
	if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		return "", fmt.Errorf("%s is not a cgroup: %w", root, err)
	}
	probe := filepath.Join(root, fmt.Sprintf("probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	defer os.Remove(probe)
	if err := probeStart(probe); err != nil {
		return "", err
	}
	return root, nil
}

// probeStart starts a short program directly inside cgroup dir.
func probeStart(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	prog := ""
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if _, err := os.Stat(p); err == nil {
			prog = p
			break
		}
	}
	if prog == "" {
		// Nothing to probe with: trust the permission bits.
		return unix.Access(filepath.Join(dir, "cgroup.procs"), unix.W_OK)
	}
	cmd := exec.Command(prog)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("start inside %s: %w", dir, err)
	}
	return nil
}

// cgroupPopulated reports whether the cgroup at dir or any descendant
// still has a process ("populated 1" in cgroup.events).
func cgroupPopulated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
			return string(bytes.TrimSpace(v)) == "1", nil
		}
	}
	return false, nil
}

// cgroupKill kills every process of the cgroup at dir and its descendants
// and waits until none is left, up to killWait. Without cgroup.kill (Linux
// < 5.14) it freezes the tree and SIGKILLs each member.
func cgroupKill(dir string) error {
	if pop, err := cgroupPopulated(dir); err != nil || !pop {
		return err
	}
	err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	if errors.Is(err, fs.ErrNotExist) {
		err = killByList(dir)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kill cgroup %s: %w", dir, err)
	}
	deadline := time.Now().Add(killWait)
	for {
		pop, err := cgroupPopulated(dir)
		if err != nil {
			return fmt.Errorf("kill cgroup %s: %w", dir, err)
		}
		if !pop {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kill cgroup %s: still populated after %v", dir, killWait)
		}
		time.Sleep(killPoll)
	}
}

// killByList freezes the tree at dir, SIGKILLs every listed process, and
// thaws it so the kills are delivered.
func killByList(dir string) error {
	freeze := filepath.Join(dir, "cgroup.freeze")
	_ = os.WriteFile(freeze, []byte("1"), 0)
	defer os.WriteFile(freeze, []byte("0"), 0)
	for _, pid := range cgroupPids(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return nil
}

// cgroupPids lists the processes of dir and every descendant cgroup.
func cgroupPids(dir string) []int {
	var out []int
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out
}

// cgroupRemove removes the cgroup at dir and its descendants, deepest
// first. The cgroups must be empty.
func cgroupRemove(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	slices.Reverse(dirs)
	var errs []error
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
