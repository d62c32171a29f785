package wiring

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/pool"
)

// TestEarlyJailOnlyForACP: the jail LaunchEarly started a launcher in is
// the one an ACP agent's launch confines it in; a launch that will not
// hand its program to that launcher (the provider became a terminal
// program's) gets a jail of its own, and the waiting launcher is ended
// and reaped, not left in the agent's cgroup.
func TestEarlyJailOnlyForACP(t *testing.T) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	sb, err := sandbox.Open(sandbox.Config{Name: "agentpool-test-" + hex.EncodeToString(b[:]),
		Launcher: []string{os.Args[0]}, LauncherEnv: []string{sandbox.EnvLauncher + "=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = sb.Close()
		if st := sb.Status(); st.Cgroup != "" {
			_ = os.Remove(st.Cgroup)
		}
	}()
	st := sb.Status()
	agenttest.RequireFeature(t, st.Namespaces && st.Containment == sandbox.ContainCgroup, "namespaces and a writable cgroup v2 hierarchy")
	c := Confiner{Sandbox: sb, TmpRoot: t.TempDir()}
	wt := t.TempDir()
	spec := backends.Spec{Provider: "fake", Kind: backends.KindACP, Path: "/bin/sh", Dir: wt, Sandbox: backends.SandboxSpec{Enabled: true}}
	launch := func(t *testing.T, session string, kind backends.Kind) (early, got *sandbox.Jail, waiting []int) {
		t.Helper()
		e, ok := c.launchEarly(spec, session)
		if !ok {
			t.Fatal("nothing started early for a confined ACP agent")
		}
		early = e.(earlyJail).j
		procs := filepath.Join(early.Describe().Cgroup, "cgroup.procs")
		deadline := time.Now().Add(5 * time.Second)
		for len(waiting) < 2 && time.Now().Before(deadline) {
			raw, _ := os.ReadFile(procs)
			waiting = waiting[:0]
			for _, f := range strings.Fields(string(raw)) {
				pid, _ := strconv.Atoi(f)
				waiting = append(waiting, pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
		run := spec
		run.Kind = kind
		j, _, _, err := c.agentJail(pool.LaunchRequest{Spec: run, Session: session, Worktree: pool.Worktree{Path: wt}, Early: e, Emit: func(backends.Event) {}}, "", "")
		if err != nil {
			t.Fatal(err)
		}
		got = j.(*sandbox.Jail)
		t.Cleanup(func() { _ = got.Release() })
		return early, got, waiting
	}
	if early, got, _ := launch(t, "s1", backends.KindACP); got != early {
		t.Error("an ACP agent's launch did not take the jail started early")
	}
	early, got, waiting := launch(t, "s2", backends.KindPTY)
	if got == early || len(waiting) != 2 {
		t.Fatalf("a terminal program's launch took the jail started early (or none waited: %v)", waiting)
	}
	deadline := time.Now().Add(5 * time.Second)
	for slices.ContainsFunc(waiting, func(pid int) bool { _, err := os.Stat("/proc/" + strconv.Itoa(pid)); return err == nil }) {
		if time.Now().After(deadline) {
			t.Fatalf("the launcher started early for a terminal program's launch still runs: %v", waiting)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
