package sandbox_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// cgroupPids lists the processes in the jail's cgroup.
func cgroupPids(t *testing.T, j *sandbox.Jail) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(j.Describe().Cgroup, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		pids = append(pids, pid)
	}
	return pids
}

// environOf is the environment pid started with.
func environOf(pid int) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return strings.FieldsFunc(string(b), func(r rune) bool { return r == 0 })
}

// earlyJail makes a jail of cfg and starts its launcher early; it returns once the launcher and its namespace's first process
// are in the jail's cgroup, with their pids.
func earlyJail(t *testing.T, m *sandbox.Manager, cfg sandbox.JailConfig) (*sandbox.Jail, []int) {
	t.Helper()
	j, err := m.NewJail(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Release() })
	if err := j.StartEarly(sandbox.AgentNice); err != nil {
		t.Fatal(err)
	}
	var pids []int
	waitFor(t, func() bool { pids = cgroupPids(t, j); return len(pids) == 2 })
	return j, pids
}

// gone reports whether pid has ended and been reaped.
func gone(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return os.IsNotExist(err)
}

// TestEarlyLaunch: a launcher started before its program's worktree
// exists waits in the jail's cgroup with nothing of the program's, then
// runs the program it is given — in that worktree, with its environment,
// in namespaces and under the rules — as the process the daemon holds;
// the pipe it was given the program on is not the program's.
func TestEarlyLaunch(t *testing.T) {
	m := nsManager(t)
	wt := filepath.Join(t.TempDir(), "wt") // made once the launcher waits
	j, waiting := earlyJail(t, m, sandbox.JailConfig{Path: []string{"s1", "agent", "agent"}, Session: "s1", TmpRoot: t.TempDir()})
	for _, pid := range waiting {
		env := environOf(pid)
		if slices.ContainsFunc(env, func(kv string) bool {
			return !strings.HasPrefix(kv, sandbox.EnvUnshare+"=") && !strings.HasPrefix(kv, sandbox.EnvLauncher+"=")
		}) {
			t.Errorf("waiting launcher %d has an environment beyond its own variables: %q", pid, env)
		}
	}
	// The pipe the launch comes on: the namespace's first process reads
	// it (the launcher that forked it may not have closed its copy yet).
	var late []string
	for _, pid := range waiting {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", pid)); err == nil {
			late = append(late, l)
		}
	}
	late = slices.Compact(late)
	if len(late) != 1 || !strings.HasPrefix(late[0], "pipe:") {
		t.Fatalf("the waiting launchers' fd 3: %q; want one pipe", late)
	}
	if err := os.Mkdir(wt, 0o755); err != nil {
		t.Fatal(err)
	}
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: backends.SandboxSpec{Enabled: true}, Worktree: wt, Exe: "/bin/sh", PATH: os.Getenv("PATH")})
	if err := j.Configure(&pol, nil, nil); err != nil {
		t.Fatal(err)
	}
	line := `pwd; echo "$EARLY_VAR"; readlink /proc/self/ns/pid; nice; echo hi > f && cat f; echo x > /etc/early-test 2>/dev/null || echo refused; for f in /proc/$$/fd/*; do printf '%s ' "$(readlink $f)"; done`
	proc, err := backends.StartProcess(backends.ProcessConfig{Path: "/bin/sh", Args: []string{"-c", line},
		Env: append(os.Environ(), "EARLY_VAR=given late"), Dir: wt, Jail: j})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Stop(t.Context()) })
	if !slices.Contains(waiting, proc.PID()) {
		t.Errorf("the program runs as pid %d, not in the launcher that waited (%v)", proc.PID(), waiting)
	}
	out, err := io.ReadAll(proc.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the program did not end")
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	self, _ := os.Readlink("/proc/self/ns/pid")
	if len(got) != 7 {
		t.Fatalf("program said %q (stderr %q); want 7 lines", out, proc.Tail())
	}
	want := []string{wt, "given late", "", strconv.Itoa(sandbox.AgentNice), "hi", "refused", ""}
	for i, w := range want {
		if i == 2 {
			if got[i] == self || !strings.HasPrefix(got[i], "pid:") {
				t.Errorf("program's PID namespace %q; want its own (the daemon's is %s)", got[i], self)
			}
			continue
		}
		if i == 6 {
			if fds := strings.Fields(got[i]); slices.Contains(fds, late[0]) || len(fds) < 3 {
				t.Errorf("the program's files %q; want its stdio, and not the launch's pipe %s", fds, late[0])
			}
			continue
		}
		if strings.TrimSpace(got[i]) != w {
			t.Errorf("line %d: %q, want %q (all: %q)", i, got[i], w, got)
		}
	}
}

// TestEarlyLaunchAbandoned: a launcher started early whose jail is
// released without a program ends and is reaped; one whose launch has no
// view (the provider's sandbox off) gives way to the program started as
// usual in the same jail, and is reaped too.
func TestEarlyLaunchAbandoned(t *testing.T) {
	m := nsManager(t)
	start := func(t *testing.T, path string) (*sandbox.Jail, []int) {
		return earlyJail(t, m, sandbox.JailConfig{Path: []string{path, "agent", "agent"}})
	}
	t.Run("released", func(t *testing.T) {
		j, pids := start(t, "s1")
		dir := j.Describe().Cgroup
		if err := j.Release(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return gone(pids[0]) && gone(pids[1]) })
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the jail's cgroup %s after its release: %v", dir, err)
		}
	})
	t.Run("no view", func(t *testing.T) {
		j, pids := start(t, "s2")
		if err := j.Configure(nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		proc, err := backends.StartProcess(backends.ProcessConfig{Path: "/bin/sh", Args: []string{"-c", "readlink /proc/self/ns/pid"}, Dir: t.TempDir(), Jail: j})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = proc.Stop(t.Context()) })
		out, _ := io.ReadAll(proc.Stdout())
		<-proc.Done()
		self, _ := os.Readlink("/proc/self/ns/pid")
		if strings.TrimSpace(string(out)) != self || slices.Contains(pids, proc.PID()) {
			t.Errorf("program in PID namespace %q as pid %d; want the daemon's %s, started anew (not one of %v)", out, proc.PID(), self, pids)
		}
		waitFor(t, func() bool { return gone(pids[0]) && gone(pids[1]) })
	})
}
