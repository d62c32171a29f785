package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestAgentWorldUnprivileged runs the attacks on sockets, on loopback and
// on capabilities with the daemon run by an ordinary user, as most users
// run it. Where that user may not have user namespaces, the daemon must
// say that its agents run under Landlock only.
func TestAgentWorldUnprivileged(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	u := newOtherUser(t)
	base := openBase(t)
	w := &world{confineFixture: newConfineFixtureIn(t, base), user: &u}
	w.addr = freeLoopback(t)
	w.port, _ = strconv.Atoi(w.addr[strings.LastIndexByte(w.addr, ':')+1:])
	// The test binary (the agent) and the daemon's binary where the
	// user can run them.
	bin := filepath.Join(base, "bin")
	mkdirMode(t, bin, 0o755)
	for _, p := range []*string{&w.exe, &w.bin} {
		b, err := os.ReadFile(*p)
		if err != nil {
			t.Fatal(err)
		}
		*p = filepath.Join(bin, filepath.Base(*p))
		if err := os.WriteFile(*p, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	attacks := w.prepare(t, attackSockets, attackLoopback, attackListedLoopback, attackProcesses, attackCapabilities, attackTerminal, attackHistory)
	state := filepath.Join(base, "state")
	mkdirMode(t, state, 0o700)
	_ = filepath.Walk(base, func(p string, _ os.FileInfo, err error) error {
		if err == nil && p != base && p != bin && !strings.HasPrefix(p, bin+"/") {
			w.own(t, p)
		}
		return err
	})
	w.out = &lockedBuffer{b: &bytes.Buffer{}}
	w.d = &daemon{t: t, bin: w.bin, home: w.home, out: w.out.b}
	w.d.cmd = exec.Command(w.bin, "serve", "--addr", w.addr, "--log-level", "debug")
	w.d.cmd.Dir = base
	w.d.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.fakeHome, "USER=" + u.name, "LOGNAME=" + u.name,
		"AGENTPOOL_HOME=" + w.home, "XDG_STATE_HOME=" + state}
	w.d.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}}
	w.d.cmd.Stdout, w.d.cmd.Stderr = w.out, w.out
	if err := w.d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.d.cmd.Process.Signal(syscall.SIGTERM)
		_ = w.d.cmd.Wait()
	})
	w.d.connect(w.out)

	st := health(t, w.d)
	t.Logf("the daemon of user %s: containment %s, namespaces %v (%s), warnings %q", u.name, st.Containment, st.Namespaces, st.NamespacesError, st.Warnings)
	if !st.Namespaces {
		warned := false
		for _, warning := range st.Warnings {
			warned = warned || strings.HasPrefix(warning, "Landlock only: ")
		}
		if !warned {
			t.Fatalf("agents of user %s have no namespaces (%s) and the health warnings %q do not say Landlock only", u.name, st.NamespacesError, st.Warnings)
		}
		// Landlock only is right where the user may not have namespaces,
		// and a failure of the daemon's where the user may.
		if out, err := u.unshare(); err == nil {
			t.Errorf("user %s makes user, mount, PID, IPC and network namespaces (unshare), yet the daemon's agents have none: %s", u.name, st.NamespacesError)
		} else {
			t.Logf("user %s may not make namespaces: %v\n%s", u.name, err, out)
		}
		return
	}
	w.attack(t, attacks)
}

// unshare runs unshare(1) as u in new user, mount, PID, IPC and network
// namespaces, as the daemon's launcher makes them; an error when u may not
// (or when there is no unshare(1) to tell).
func (u otherUser) unshare() (string, error) {
	path, err := exec.LookPath("unshare")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(path, "--user", "--map-current-user", "--mount", "--pid", "--fork", "--ipc", "--net", "true")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
