package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// daemonsDirName is the directory of the per-user data directory in which
// every running daemon leaves a pointer naming its data directory (see
// writePointer), so that the CLI can list the user's daemons and pick one.
const daemonsDirName = "daemons"

// userDefaultHome is the per-user data directory, $XDG_STATE_HOME/agentpool
// or ~/.local/state/agentpool (rule 3 of findHome), or "" when there is
// neither an absolute XDG_STATE_HOME nor an absolute home directory.
func userDefaultHome(getenv func(string) string) string {
	if st := getenv("XDG_STATE_HOME"); filepath.IsAbs(st) {
		return filepath.Join(st, userStateDir)
	}
	if h := getenv("HOME"); h != "" && filepath.IsAbs(h) {
		return filepath.Join(filepath.Clean(h), ".local", "state", userStateDir)
	}
	return ""
}

// protectedHomes are the paths no agent or setup may be granted: the
// daemon's data directory, and the per-user one, which holds the pointers
// the client follows (an agent that could rewrite one would choose the
// daemon the user's CLI talks to).
func protectedHomes(home string, getenv func(string) string) []string {
	out := []string{home}
	if d := userDefaultHome(getenv); d != "" && d != home {
		out = append(out, d)
	}
	return out
}

// daemonsDir is the per-user directory of the daemons' pointers, or ""
// when there is no per-user data directory.
func daemonsDir(getenv func(string) string) string {
	if d := userDefaultHome(getenv); d != "" {
		return filepath.Join(d, daemonsDirName)
	}
	return ""
}

// pointer is the content of a daemon's pointer file.
type pointer struct {
	// Home is the daemon's data directory, absolute.
	Home string `json:"home"`
	// PID is the daemon's, so that a pointer whose daemon died before it
	// wrote daemon.json is known to be stale.
	PID int `json:"pid"`
}

// pointerPath is the pointer file in dir of the daemon whose data
// directory is home (absolute): named by a hash of home, so that each
// data directory has one.
func pointerPath(dir, home string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(home)))
	return filepath.Join(dir, hex.EncodeToString(sum[:8])+".json")
}

// writePointer leaves in dir the pointer of this process, the daemon of
// home: dir is created 0700 when missing (with the per-user data directory
// holding it), and the file is replaced atomically with mode 0600.
func writePointer(dir, home string) error {
	path := pointerPath(dir, home)
	if err := os.MkdirAll(dir, privateDirMode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := checkTrusted(dir); err != nil {
		return fmt.Errorf("write %s: %w", path, refusal(dir, err))
	}
	b, err := json.Marshal(pointer{Home: home, PID: os.Getpid()})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".pointer.*") // mode 0600; never listed (not *.json)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}

// removePointer removes the pointer of home from dir if it is this
// process's (a daemon started since on the same data directory may have
// replaced it).
func removePointer(dir, home string) {
	path := pointerPath(dir, home)
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var p pointer
	if json.Unmarshal(b, &p) == nil && p.PID == os.Getpid() {
		_ = os.Remove(path)
	}
}

// runningDaemon is a daemon found through its pointer.
type runningDaemon struct {
	// Home is its data directory.
	Home string `json:"home"`
	// Addr and PID are those of its daemon.json.
	Addr string `json:"addr"`
	PID  int    `json:"pid"`
	info daemonInfo
}

// listDaemons returns the daemons of the pointers in dir that run, sorted
// by data directory. Everything is checked as the client checks the data
// directory it uses (see trustChecker): the directory dir, each pointer,
// the data directory it names and that directory's daemon.json. A pointer
// that fails a check, names a data directory that is gone or whose
// daemon.json names a dead process, or whose own daemon died before
// writing daemon.json, is stale: it is ignored and removed. A missing dir
// lists nothing; one that cannot be trusted is an error, and none of its
// pointers is followed.
func listDaemons(dir string) ([]runningDaemon, error) {
	if dir == "" {
		return nil, nil
	}
	if _, err := checkTrusted(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, refusal(dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list the daemons: %w", err)
	}
	var out []runningDaemon
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		d, stale := followPointer(path)
		if stale {
			_ = os.Remove(path)
			continue
		}
		if d != nil {
			out = append(out, *d)
		}
	}
	slices.SortFunc(out, func(a, b runningDaemon) int { return strings.Compare(a.Home, b.Home) })
	return out, nil
}

// followPointer returns the running daemon the pointer at path names, nil
// when there is none now; stale says the pointer is stale and may be
// removed (see listDaemons).
func followPointer(path string) (d *runningDaemon, stale bool) {
	b, err := readTrusted(path)
	if err != nil {
		return nil, true
	}
	var p pointer
	if err := json.Unmarshal(b, &p); err != nil || !filepath.IsAbs(p.Home) || strings.ContainsAny(p.Home, "\n\x00") ||
		pointerPath(filepath.Dir(path), p.Home) != path {
		return nil, true
	}
	if _, err := checkTrusted(p.Home); err != nil {
		return nil, true
	}
	info, err := readDaemonFile(p.Home)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Its daemon has not written daemon.json yet, or died first.
		return nil, !pidAlive(p.PID)
	case err != nil, !info.alive():
		return nil, true
	}
	return &runningDaemon{Home: p.Home, Addr: info.Addr, PID: info.PID, info: info}, false
}

// pidAlive says whether a process pid may run (unknown pids do).
func pidAlive(pid int) bool {
	return pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH
}

// atOrAbove says whether the data directory home is at or above dir: dir
// is home or inside it, or home is a .agentpool (a quick start's, in a
// checkout) whose parent is dir or one of its ancestors. depth ranks the
// answers, the nearest highest.
func atOrAbove(home, dir string) (depth int, ok bool) {
	anchor := home
	if filepath.Base(home) == defaultHomeDir {
		anchor = filepath.Dir(home)
	}
	rel, err := filepath.Rel(anchor, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return 0, false
	}
	return len(anchor), true
}
