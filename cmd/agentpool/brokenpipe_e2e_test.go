package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDaemonShutsDownCleanlyWithoutItsOutput is `agentpool serve 2>&1 |
// tee log` ended by Ctrl-C: the terminal interrupts the whole process
// group, tee goes first, and the daemon's shutdown then writes to a pipe
// nobody reads. The daemon must still shut down cleanly: its daemon.json
// and its per-user pointer removed, its agents stopped, its cgroups gone.
func TestDaemonShutsDownCleanlyWithoutItsOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"asker": askingScript(1)})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# pipe\n"})

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, bin: bin, home: home}
	d.cmd = exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--log-level", "debug")
	state := t.TempDir()
	d.cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home, "XDG_STATE_HOME="+state)
	d.cmd.Stdout, d.cmd.Stderr = w, w
	// Its own process group, as a job started from a shell is, so that
	// the interrupt reaches it (and its agents' launcher) and not the test.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(func() { removeCgroupTree(home) })
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out := &ptyOutput{}
	readerDone := make(chan struct{})
	go func() { defer close(readerDone); _, _ = copyAll(out, r) }()
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	d.connect(out)
	pointer := pointerPath(filepath.Join(state, userStateDir, daemonsDirName), home)
	if _, err := os.Stat(pointer); err != nil {
		t.Fatalf("the running daemon's per-user pointer: %v", err)
	}

	// An agent runs in a cgroup of the daemon's, waiting for an answer.
	session := d.newSessionWith(repo, "asker")
	prompt := exec.Command(bin, "prompt", session, "build it")
	prompt.Env = append(os.Environ(), "AGENTPOOL_HOME="+home)
	if err := prompt.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = prompt.Process.Kill(); _ = prompt.Wait() }()
	out.waitFor(t, "permission requested", 30*time.Second)
	b, err := os.ReadFile(filepath.Join(home, cgroupFile))
	if err != nil {
		t.Fatalf("the daemon wrote no cgroup file: %v", err)
	}
	cgroup := strings.TrimSpace(string(b))

	// tee ends: nobody reads the daemon's output any more.
	r.Close()
	<-readerDone
	if err := syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if ee, ok := err.(*exec.ExitError); ok && ee.Sys().(syscall.WaitStatus).Signaled() {
			t.Errorf("the daemon died of %v during its shutdown; want a clean exit", ee.Sys().(syscall.WaitStatus).Signal())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not exit within 30 s of SIGINT")
	}
	if _, err := os.Stat(filepath.Join(home, daemonFileName)); !os.IsNotExist(err) {
		t.Errorf("daemon.json after the shutdown: stat error = %v; want it removed", err)
	}
	if _, err := os.Stat(pointer); !os.IsNotExist(err) {
		t.Errorf("the daemon's per-user pointer after the shutdown: stat error = %v; want it removed", err)
	}
	if _, err := os.Stat(cgroup); !os.IsNotExist(err) {
		var left []string
		_ = filepath.WalkDir(cgroup, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				left = append(left, p)
			}
			return nil
		})
		t.Errorf("the daemon's cgroups are left after its shutdown: %q", left)
	}
}
