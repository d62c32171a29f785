package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The quick start's daemon (its data directory in the checkout, named by
// AGENTPOOL_HOME as `make run` does) is found by a client run in the
// user's own repository, outside the checkout, with no AGENTPOOL_HOME:
// serve leaves a pointer to its data directory in the per-user daemons
// directory, and removes it when it stops.
func TestClientFindsTheQuickStartDaemonFromAnotherRepository(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	tmp := t.TempDir()
	user := mkdirMode(t, filepath.Join(tmp, "user"), 0o700)
	state := filepath.Join(user, "state")
	checkout := mkdirMode(t, filepath.Join(tmp, "checkout"), 0o755)
	home := filepath.Join(checkout, defaultHomeDir)
	repo := mkdirMode(t, filepath.Join(tmp, "mine"), 0o755)
	e2eGit(t, repo, "init", "-q")
	e2eGit(t, repo, "commit", "-q", "--allow-empty", "-m", "init")
	env := userEnv(user, "XDG_STATE_HOME="+state)

	d := startDaemon(t, bin, home, "HOME="+user, "XDG_STATE_HOME="+state)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			_ = d.cmd.Wait()
		}
	})
	pointer := pointerPath(filepath.Join(state, userStateDir, daemonsDirName), home)
	fi, err := os.Stat(pointer)
	if err != nil {
		t.Fatalf("serve left no pointer to its data directory: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %04o; want 0600", pointer, fi.Mode().Perm())
	}
	for _, dir := range []string{filepath.Dir(pointer), filepath.Dir(filepath.Dir(pointer))} {
		if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, mode %v; want 0700", dir, err, di.Mode())
		}
	}

	out, err := runIn(t, repo, env, bin, "session", "new", "--repo", repo, "--agent", "demo")
	if err != nil {
		t.Fatalf("session new from %s (outside the checkout): %v\n%s", repo, err, out)
	}
	out, err = runIn(t, repo, env, bin, "session", "list")
	if err != nil || !strings.Contains(out, repo) {
		t.Fatalf("session list from %s: %v\n%s\nwant the session of %s", repo, err, out, repo)
	}

	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
	stopped = true
	if _, err := os.Stat(pointer); !os.IsNotExist(err) {
		t.Errorf("after the daemon stopped, %s: %v; want it removed", pointer, err)
	}
	out, err = runIn(t, repo, env, bin, "session", "list")
	if err == nil || !strings.Contains(out, "no daemon found") {
		t.Errorf("session list with the daemon stopped: %v\n%s\nwant no daemon found", err, out)
	}
}

// A pointer is followed only when it and the data directory it names can
// be trusted: one that others may write, or one naming another user's data
// directory, is ignored and removed, and no request (no token) goes to the
// address in that directory's daemon.json.
func TestClientRefusesAnUntrustedPointer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the client")
	}
	u := newOtherUser(t)
	bin := agentpoolBinary(t)
	base := openBase(t)
	trap := newTokenTrap(t)
	me := mkdirMode(t, filepath.Join(base, "me"), 0o700)
	state := filepath.Join(me, "state")
	dir := mkdirMode(t, filepath.Join(state, userStateDir, daemonsDirName), 0o700)
	repo := mkdirMode(t, filepath.Join(me, "repo"), 0o700)
	trapJSON := strings.Replace(trap.daemonJSON(), `"pid": 0`, `"pid": `+strconv.Itoa(os.Getpid()), 1)

	// mine is a data directory of the user's own that sends to the trap;
	// theirs is the same, owned by another user.
	mine := mkdirMode(t, filepath.Join(me, "mine"), 0o700)
	theirs := mkdirMode(t, filepath.Join(base, "theirs"), 0o755)
	for _, dir := range []string{mine, theirs} {
		for name, content := range map[string]string{daemonFileName: trapJSON, tokenFileName: "my-secret\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	u.give(t, theirs, filepath.Join(theirs, daemonFileName), filepath.Join(theirs, tokenFileName))

	plant := func(t *testing.T, home string, mode os.FileMode) string {
		t.Helper()
		pointer := pointerPath(dir, home)
		_ = os.Remove(pointer)
		content := fmt.Sprintf(`{"home": %q, "pid": %d}`, home, os.Getpid())
		if err := os.WriteFile(pointer, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(pointer, mode); err != nil {
			t.Fatal(err)
		}
		return pointer
	}
	ps := func(t *testing.T) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, "ps")
		cmd.Dir, cmd.Env = repo, userEnv(me, "XDG_STATE_HOME="+state)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	for _, tt := range []struct {
		name, home string
		mode       os.FileMode
	}{
		{"writable by others", mine, 0o666},
		{"naming another user's data directory", theirs, 0o600},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pointer := plant(t, tt.home, tt.mode)
			out, err := ps(t)
			if err == nil || !strings.Contains(out, "no daemon found") {
				t.Errorf("agentpool ps: %v\n%s\nwant it to fail saying no daemon found", err, out)
			}
			if got := trap.requests(); len(got) > 0 {
				t.Errorf("the address named through the pointer got requests with Authorization %q", got)
			}
			if _, err := os.Stat(pointer); !os.IsNotExist(err) {
				t.Errorf("the untrusted pointer %s: %v; want it removed", pointer, err)
			}
		})
	}

	// The same pointer, trusted, is followed: the checks above are what
	// kept the trap from being asked at all. Followed, the trap gets a
	// hello it cannot answer, and still not the token.
	plant(t, mine, 0o600)
	out, err := ps(t)
	deadline := time.Now().Add(5 * time.Second)
	for len(trap.requests()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := trap.requests(); len(got) == 0 || !strings.Contains(out, "is not the daemon of "+mine) {
		t.Errorf("a trusted pointer was not followed: requests %q; ps: %v\n%s", got, err, out)
	}
	if got := trap.requests(); slices.Contains(got, "Bearer my-secret") {
		t.Errorf("the trap that cannot prove itself got the token: %q", got)
	}
}
