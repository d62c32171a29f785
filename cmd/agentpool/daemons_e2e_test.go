package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// runSplit runs the binary in dir with env and returns its stdout and
// stderr apart: the daemon a command talks to is named on stderr only.
func runSplit(t *testing.T, dir string, env []string, bin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// daemonAddr is the address in home's daemon.json.
func daemonAddr(t *testing.T, home string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, daemonFileName))
	if err != nil {
		t.Fatal(err)
	}
	var d daemonInfo
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d.Addr
}

// Several daemons of one user run at once (their pointers in the same
// per-user directory): the CLI lists them, picks the one whose data
// directory is at or above the current directory, else the per-user
// default's, else the only one running, and names the one it talks to on
// stderr (never stdout) while several run. When the chosen one stops it
// does not go on to another: it lists those that run and how to pick one.
// serve on a port one of them holds says which.
func TestSeveralDaemonsTheCLIListsPicksAndNames(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs several daemons")
	}
	bin := agentpoolBinary(t)
	tmp := t.TempDir()
	user := mkdirMode(t, filepath.Join(tmp, "user"), 0o700)
	state := filepath.Join(user, "state")
	checkout := mkdirMode(t, filepath.Join(tmp, "checkout"), 0o755)
	sub := mkdirMode(t, filepath.Join(checkout, "cmd", "x"), 0o755)
	quick := filepath.Join(checkout, defaultHomeDir)
	other := filepath.Join(tmp, "other", "data")
	perUser := filepath.Join(state, userStateDir)
	repo := mkdirMode(t, filepath.Join(tmp, "mine"), 0o755)
	env := userEnv(user, "XDG_STATE_HOME="+state)
	daemonEnv := []string{"HOME=" + user, "XDG_STATE_HOME=" + state}

	stop := func(d *daemon) {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	}
	a := startDaemon(t, bin, quick, daemonEnv...)
	a.stopAtCleanup()
	b := startDaemon(t, bin, other, daemonEnv...)
	b.stopAtCleanup()
	aAddr, bAddr := daemonAddr(t, quick), daemonAddr(t, other)

	// Listed, without asking either daemon anything.
	out, errOut, err := runSplit(t, repo, env, bin, "daemons")
	if err != nil || !strings.Contains(out, quick) || !strings.Contains(out, aAddr) || !strings.Contains(out, other) || !strings.Contains(out, bAddr) {
		t.Errorf("agentpool daemons: %v\n%s%s\nwant %s (%s) and %s (%s)", err, out, errOut, quick, aAddr, other, bAddr)
	}

	// In the user's own repository neither is at or above, and no daemon
	// runs in the per-user default: the CLI picks neither.
	out, errOut, err = runSplit(t, repo, env, bin, "ps")
	for _, want := range []string{"AGENTPOOL_HOME=" + quick, "AGENTPOOL_HOME=" + other} {
		if err == nil || !strings.Contains(errOut, want) {
			t.Errorf("ps in %s with two daemons elsewhere: %v\nstdout %q\nstderr %q\nwant it to fail naming %q", repo, err, out, errOut, want)
		}
	}

	// Below the checkout: its daemon, named on stderr; stdout is the
	// command's alone.
	out, errOut, err = runSplit(t, sub, env, bin, "ps")
	if err != nil || out != "no agents running\n" {
		t.Errorf("ps in %s: %v\nstdout %q\nstderr %q\nwant only the pool on stdout", sub, err, out, errOut)
	}
	if want := "using the daemon of " + quick + " at " + aAddr; !strings.Contains(errOut, want) {
		t.Errorf("ps in %s: stderr %q; want it to name the daemon: %q", sub, errOut, want)
	}
	out, _, _ = runSplit(t, sub, env, bin, "daemons")
	if !strings.Contains(out, "* ") || !strings.Contains(out[strings.Index(out, "*"):], quick) {
		t.Errorf("agentpool daemons in %s:\n%s\nwant %s marked *", sub, out, quick)
	}

	// The per-user default's daemon is the one for the user's repository.
	c := startDaemon(t, bin, perUser, daemonEnv...)
	c.stopAtCleanup()
	cAddr := daemonAddr(t, perUser)
	out, errOut, err = runSplit(t, repo, env, bin, "ps")
	if err != nil || out != "no agents running\n" || !strings.Contains(errOut, "using the daemon of "+perUser+" at "+cAddr+" (3 of your daemons run") {
		t.Errorf("ps in %s with the per-user daemon running: %v\nstdout %q\nstderr %q\nwant the per-user daemon, named", repo, err, out, errOut)
	}

	// It stops: no silent move to another daemon.
	stop(c)
	out, errOut, err = runSplit(t, repo, env, bin, "ps")
	if err == nil || out != "" || !strings.Contains(errOut, "no daemon found in "+perUser) || !strings.Contains(errOut, "AGENTPOOL_HOME="+quick) {
		t.Errorf("ps in %s after the per-user daemon stopped: %v\nstdout %q\nstderr %q\nwant no daemon found, with the daemons that run", repo, err, out, errOut)
	}

	// serve on the port the quick start's daemon holds says whose it is.
	cmd := exec.Command(bin, "serve", "--addr", aAddr)
	cmd.Dir, cmd.Env = repo, env
	sout, err := cmd.CombinedOutput()
	if want := "another of your agentpool daemons, the one of the data directory " + quick; err == nil || !strings.Contains(string(sout), want) {
		t.Errorf("serve --addr %s: %v\n%s\nwant %q", aAddr, err, sout, want)
	}

	// With one daemon left it is the one, and is not named.
	stop(b)
	out, errOut, err = runSplit(t, repo, env, bin, "ps")
	if err != nil || out != "no agents running\n" || strings.Contains(errOut, "using the daemon") {
		t.Errorf("ps in %s with only %s running: %v\nstdout %q\nstderr %q", repo, quick, err, out, errOut)
	}
	if _, err := os.Stat(pointerPath(filepath.Join(perUser, daemonsDirName), other)); !os.IsNotExist(err) {
		t.Errorf("the pointer of the stopped daemon of %s: %v; want it removed", other, err)
	}
}

// A pointer whose daemon died without removing it (killed) is ignored
// and removed by the next listing, as is one whose daemon died before it
// wrote its daemon.json.
func TestStalePointersAreCleaned(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the client")
	}
	bin := agentpoolBinary(t)
	tmp := t.TempDir()
	user := mkdirMode(t, filepath.Join(tmp, "user"), 0o700)
	state := filepath.Join(user, "state")
	dir := mkdirMode(t, filepath.Join(state, userStateDir, daemonsDirName), 0o700)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := dead.Process.Pid
	var pointers []string
	for i, withDaemonFile := range []bool{true, false} {
		home := mkdirMode(t, filepath.Join(tmp, fmt.Sprint("home", i)), 0o700)
		if withDaemonFile {
			js := fmt.Sprintf(`{"addr": "127.0.0.1:1", "pid": %d}`, deadPID)
			if err := os.WriteFile(filepath.Join(home, daemonFileName), []byte(js), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		p := pointerPath(dir, home)
		if err := os.WriteFile(p, fmt.Appendf(nil, `{"home": %q, "pid": %d}`, home, deadPID), 0o600); err != nil {
			t.Fatal(err)
		}
		pointers = append(pointers, p)
	}
	out, errOut, err := runSplit(t, user, userEnv(user, "XDG_STATE_HOME="+state), bin, "daemons")
	if err != nil || !strings.HasPrefix(out, "no daemon running") {
		t.Errorf("agentpool daemons: %v\n%s%s\nwant no daemon running", err, out, errOut)
	}
	for _, p := range pointers {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("stale pointer %s: %v; want it removed", p, err)
		}
	}
}
