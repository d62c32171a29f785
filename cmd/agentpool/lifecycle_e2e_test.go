package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// TestEndToEndTurnNumbersCloseAndPrune, through the built binary: turns
// are numbered per session in the CLI's output, hints and events; a closed
// session's turns, diffs and events stay readable; a session without work
// leaves no branch; session list hides closed sessions unless --all; prune
// forgets old closed sessions, keeping branches with commits unless
// --branches.
func TestEndToEndTurnNumbersCloseAndPrune(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := newE2ERepo(t)
	d := startDaemon(t, bin, home)
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
	})
	run := func(args ...string) string {
		t.Helper()
		out, err := d.cli(args...)
		if err != nil {
			t.Fatalf("agentpool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	fails := func(args ...string) string {
		t.Helper()
		out, err := d.cli(args...)
		if err == nil {
			t.Fatalf("agentpool %s succeeded; want a failure:\n%s", strings.Join(args, " "), out)
		}
		return out
	}
	newSession := func(title string) string {
		t.Helper()
		out := run("session", "new", "--repo", repo, "--agent", "demo", "--title", title)
		m := regexp.MustCompile(`session (\S+) created`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("session new output has no id:\n%s", out)
		}
		return m[1]
	}

	first, second, idle := newSession("first"), newSession("second"), newSession("idle")
	for i, p := range []struct{ session, text, hint string }{
		{first, "one", first + " --turn 1"},
		{first, "two", first + " --turn 2"},
		{second, "three", second + " --turn 1"}, // not turn 3: numbers are per session
	} {
		out := d.promptApproved(p.session, p.text)
		if !strings.Contains(out, "diff "+p.hint+"\n") {
			t.Errorf("prompt %d output lacks the hint diff %s:\n%s", i+1, p.hint, out)
		}
	}
	for _, id := range []string{first, second} {
		if out := run("diff", id, "--turn", "1", "--stat"); !strings.Contains(out, agenttest.DemoFile) {
			t.Errorf("diff %s --turn 1:\n%s\nwant %s", id, out, agenttest.DemoFile)
		}
		events := run("events", id)
		if !regexp.MustCompile(`turn\.started.* turn 1\b`).MatchString(events) {
			t.Errorf("events of %s lack turn.started of turn 1:\n%s", id, events)
		}
	}
	if out := fails("diff", second, "--turn", "2"); !strings.Contains(out, "no_turn") {
		t.Errorf("diff of the second session's turn 2 (it has one turn):\n%s\nwant no_turn", out)
	}
	if out := run("session", "show", second); !regexp.MustCompile(`(?m)^1\s+demo\s`).MatchString(out) {
		t.Errorf("session show of the second session lacks its turn 1:\n%s", out)
	}

	// Closed: still readable; an idle session leaves no branch.
	if out := run("session", "close", first); !strings.Contains(out, "agentpool/"+first) {
		t.Errorf("session close %s:\n%s", first, out)
	}
	if out := run("session", "close", idle); !strings.Contains(out, "left no work") {
		t.Errorf("session close of a session without work:\n%s\nwant its branch deleted", out)
	}
	if got := e2eGit(t, repo, "branch", "--list", "agentpool/"+idle); got != "" {
		t.Errorf("branch of the idle session = %q; want it deleted", got)
	}
	for _, args := range [][]string{{"diff", first, "--turn", "2"}, {"diff", first}} {
		if out := run(args...); !strings.Contains(out, "two") {
			t.Errorf("agentpool %s after close:\n%s\nwant the turn's work", strings.Join(args, " "), out)
		}
	}
	if out := run("events", first); !strings.Contains(out, "session.closed") {
		t.Errorf("events of the closed session lack session.closed:\n%s", out)
	}

	list := run("session", "list")
	if !strings.Contains(list, second) || strings.Contains(list, first) || strings.Contains(list, idle) ||
		!strings.Contains(list, "2 closed sessions not shown") {
		t.Errorf("session list:\n%s\nwant only the open session, and the closed ones counted", list)
	}
	if all := run("session", "list", "--all"); !strings.Contains(all, first) || !strings.Contains(all, idle) {
		t.Errorf("session list --all:\n%s\nwant the closed sessions too", all)
	}

	// Prune.
	if out := run("prune"); !strings.Contains(out, "no session closed more than 7d ago") {
		t.Errorf("prune (default 7d) right after closing:\n%s", out)
	}
	dry := run("prune", "--older-than", "0", "--dry-run")
	if !strings.Contains(dry, "would prune 2 closed sessions") || !strings.Contains(dry, "branch agentpool/"+first+" kept: 1 commit") {
		t.Errorf("prune --dry-run:\n%s", dry)
	}
	run("session", "show", first) // still there
	out := run("prune", "--older-than", "0s")
	head := strings.TrimSpace(e2eGit(t, repo, "rev-parse", "agentpool/"+first))
	if !strings.Contains(out, "pruned 2 closed sessions") || !strings.Contains(out, "head "+head[:12]) ||
		!strings.Contains(out, "--branches deletes it") {
		t.Errorf("prune --older-than 0s:\n%s\nwant 2 pruned, the kept branch with its head %s", out, head[:12])
	}
	if out := fails("session", "show", first); !strings.Contains(out, "not_found") {
		t.Errorf("session show of a pruned session:\n%s\nwant not_found", out)
	}
	if refs := e2eGit(t, repo, "for-each-ref", "--format=%(refname)"); !strings.Contains(refs, "refs/heads/agentpool/"+first) ||
		strings.Contains(refs, "checkpoints/"+first) {
		t.Errorf("refs after prune:\n%s\nwant the branch with commits kept, its checkpoints gone", refs)
	}

	run("session", "close", second)
	secondHead := strings.TrimSpace(e2eGit(t, repo, "rev-parse", "agentpool/"+second))
	out = run("prune", "--older-than", "0", "--branches")
	if !strings.Contains(out, "branch agentpool/"+second+" deleted: 1 commit, head "+secondHead[:12]) {
		t.Errorf("prune --branches:\n%s\nwant the branch deleted with its head %s", out, secondHead[:12])
	}
	if got := e2eGit(t, repo, "branch", "--list", "agentpool/"+second); got != "" {
		t.Errorf("branch after prune --branches = %q; want it deleted", got)
	}
	if out := run("session", "list", "--all"); strings.Contains(out, second) {
		t.Errorf("session list --all after prune:\n%s", out)
	}
}
