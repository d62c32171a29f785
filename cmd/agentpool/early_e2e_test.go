package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// descendantsOf lists the live processes under pid, with their argv.
func descendantsOf(pid int) map[int][]string {
	children := map[int][]int{}
	for _, st := range backends.Processes() {
		if st.Live() {
			children[st.PPID] = append(children[st.PPID], st.PID)
		}
	}
	out := map[int][]string{}
	queue := slices.Clone(children[pid])
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		out[p] = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		queue = append(queue, children[p]...)
	}
	return out
}

// TestKill9EndsSetupAndWaitingLauncher: a daemon killed with SIGKILL while
// a new session's setup runs, and its agent's launcher, started early,
// waits for the setup to end, leaves neither running: both die with it.
func TestKill9EndsSetupAndWaitingLauncher(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	script := map[string]any{"agent_name": "quick", "turns": []any{map[string]any{"steps": []any{map[string]any{"chunk": "Done.\n"}}}}}
	writeScripted(t, home, bin, map[string]any{"quick": script})
	d := startDaemon(t, bin, home)
	h, err := d.client.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st := confinementOf(h.Confinement)
	agenttest.RequireFeature(t, st != nil && st.Namespaces, "namespaces for agents (unprivileged user namespaces and Landlock)")
	repo := setupRepo(t, d, `{"setup": {"command": ["sleep", "61"]}}`)
	if out, err := d.cli("session", "new", "--repo", repo, "--agent", "quick", "--id", "s-kill"); err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	var tree map[int][]string
	deadline := time.Now().Add(20 * time.Second)
	for {
		tree = descendantsOf(d.cmd.Process.Pid)
		var setup, waiting bool
		for _, argv := range tree {
			setup = setup || slices.Equal(argv, []string{"sleep", "61"})
			waiting = waiting || (len(argv) == 2 && filepath.Base(argv[0]) == sandbox.LauncherBinary && argv[1] == sandbox.LateArg)
		}
		if setup && waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no setup and waiting launcher under the daemon: %v\n%s", tree, d.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.kill9()
	deadline = time.Now().Add(5 * time.Second)
	for {
		var left []string
		for pid, argv := range tree {
			if st, err := backends.ReadProcStat(pid); err == nil && st.Live() {
				left = append(left, fmt.Sprintf("%d %q", pid, argv))
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the daemon's SIGKILL, still running: %s", strings.Join(left, "; "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
