package pty_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/pty"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// TestConfinedProgram runs a terminal program in a jail: it starts inside
// its own cgroup under the launcher's Landlock rules (no-new-privs set),
// answers turns as usual, and what it left in a session of its own ends
// when the backend stops.
func TestConfinedProgram(t *testing.T) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	m, err := sandbox.Open(sandbox.Config{Name: "agentpool-test-" + hex.EncodeToString(b[:]),
		Launcher: []string{os.Args[0]}, LauncherEnv: []string{sandbox.EnvLauncher + "=1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = m.Sweep(); _ = m.Close(); _ = os.Remove(m.Status().Cgroup) })
	st := m.Status()
	agenttest.RequireFeature(t, st.Containment == sandbox.ContainCgroup && st.Landlock > 0, fmt.Sprintf("cgroups and Landlock (have %+v)", st))
	spec := fakeSpec(t)
	pidfile := filepath.Join(spec.Dir, "escaper")
	spec.Env = append(spec.Env, "FAKE_TUI_ESCAPER="+pidfile)
	spec.Sandbox = backends.SandboxSpec{Enabled: true}
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: spec.Sandbox, Worktree: spec.Dir, Exe: spec.Path, PATH: os.Getenv("PATH")})
	j, err := m.NewJail(sandbox.JailConfig{Path: []string{"s", "fake", "agent"}, Policy: &pol})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, pty.Config{Spec: spec, Jail: j})
	info := h.start(t, "")
	if c := info.Confinement; c.Containment != sandbox.ContainCgroup || c.Landlock == 0 || c.Cgroup == "" {
		t.Fatalf("Info().Confinement = %+v; want a cgroup and Landlock", c)
	}
	procs, _ := os.ReadFile(filepath.Join(info.Confinement.Cgroup, "cgroup.procs"))
	if !strings.Contains(" "+strings.Join(strings.Fields(string(procs)), " ")+" ", " "+strconv.Itoa(info.PID)+" ") {
		t.Errorf("the program (pid %d) is not in its cgroup: cgroup.procs = %q", info.PID, procs)
	}
	// The launcher sets no-new-privs a moment after the process is
	// spawned (the start does not wait for the program's first output):
	// give it that moment.
	nnp := false
	for end := time.Now().Add(5 * time.Second); !nnp && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		status, _ := os.ReadFile("/proc/" + strconv.Itoa(info.PID) + "/status")
		nnp = strings.Contains(string(status), "NoNewPrivs:\t1")
	}
	if !nnp {
		t.Errorf("the program runs without no-new-privs: the launcher did not run")
	}
	if res, err := h.prompt(t, "hello"); err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt = %+v, %v; want end_turn", res, err)
	}
	var esc []agenttest.PidEntry
	deadline := time.Now().Add(5 * time.Second)
	for len(esc) == 0 && time.Now().Before(deadline) {
		esc, _ = agenttest.ReadPidFile(pidfile)
		time.Sleep(10 * time.Millisecond)
	}
	if len(esc) != 1 || !agenttest.Alive(esc[0]) {
		t.Fatalf("escaper %v not running; the test proves nothing", esc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.b.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for agenttest.Alive(esc[0]) && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	if agenttest.Alive(esc[0]) {
		t.Errorf("escaper %v survived Stop", esc[0])
		_ = agenttest.Kill(esc[0], time.Second)
	}
	if _, err := os.Stat(info.Confinement.Cgroup); !os.IsNotExist(err) {
		t.Errorf("the program's cgroup %s is still there after Stop: %v", info.Confinement.Cgroup, err)
	}
}
