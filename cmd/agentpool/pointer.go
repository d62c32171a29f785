package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// pointerFileName is the file of the per-user data directory in which a
// daemon whose data directory is elsewhere (the quick start's, in a
// checkout) names it, so that a client run in the user's own repositories
// finds that daemon.
const pointerFileName = "current"

// homeFromPointer is how the data directory was chosen when the client
// followed the per-user pointer.
const homeFromPointer = "named by %s, which the daemon started there wrote; no daemon runs in the per-user default"

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
// daemon's data directory, and the per-user one, which holds the pointer
// the client follows (an agent that could rewrite it would choose the
// daemon the user's CLI talks to).
func protectedHomes(home string, getenv func(string) string) []string {
	out := []string{home}
	if d := userDefaultHome(getenv); d != "" && d != home {
		out = append(out, d)
	}
	return out
}

// pointerPath is the per-user pointer file, or "" when there is no
// per-user data directory.
func pointerPath(getenv func(string) string) string {
	if d := userDefaultHome(getenv); d != "" {
		return filepath.Join(d, pointerFileName)
	}
	return ""
}

// writePointer makes pointer name home: its directory is created 0700 when
// missing, and the file is replaced atomically with mode 0600.
func writePointer(pointer, home string) error {
	dir := filepath.Dir(pointer)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write %s: %w", pointer, err)
	}
	tmp, err := os.CreateTemp(dir, pointerFileName+".*") // mode 0600
	if err != nil {
		return fmt.Errorf("write %s: %w", pointer, err)
	}
	_, werr := tmp.WriteString(home + "\n")
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), pointer)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", pointer, werr)
	}
	return nil
}

// removePointer removes pointer if it still names home (another daemon
// started since may have taken it over).
func removePointer(pointer, home string) {
	b, err := os.ReadFile(pointer)
	if err == nil && strings.TrimSpace(string(b)) == home {
		_ = os.Remove(pointer)
	}
}

// followPointer returns the data directory that pointer names and its
// daemon, when all of it can be trusted: the pointer file (the user's, not
// writable by others, in directories only they or root control), the data
// directory it names (likewise), and that directory's daemon.json, whose
// daemon must be running. A missing pointer is an error wrapping
// fs.ErrNotExist; any other failure says why the pointer was not followed.
func followPointer(pointer string) (string, daemonInfo, error) {
	b, err := readTrusted(pointer)
	if err != nil {
		return "", daemonInfo{}, err
	}
	home := strings.TrimSpace(string(b))
	if !filepath.IsAbs(home) || strings.ContainsAny(home, "\n\x00") {
		return "", daemonInfo{}, fmt.Errorf("%s is not valid: it does not hold one absolute path", pointer)
	}
	if _, err := checkTrusted(home); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", daemonInfo{}, fmt.Errorf("%s names %s, which does not exist", pointer, home)
		}
		return "", daemonInfo{}, fmt.Errorf("%s names %s: %w", pointer, home, refusal(home, err))
	}
	d, err := readDaemonFile(home)
	if errors.Is(err, fs.ErrNotExist) {
		return "", daemonInfo{}, fmt.Errorf("%s names %s, where no daemon runs", pointer, home)
	}
	if err != nil {
		return "", daemonInfo{}, fmt.Errorf("%s names %s: %w", pointer, home, err)
	}
	if !d.alive() {
		return "", daemonInfo{}, fmt.Errorf("%s names %s, whose daemon (pid %d) is not running", pointer, home, d.PID)
	}
	return home, d, nil
}
