package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// TestEndToEndAgentSessions: the CLI lists an agent's own sessions of a
// repository (the agent started confined as a probe is, no session of
// ours made), creates a session from one, and says whether the agent took
// it up in the new worktree, or why it refused.
func TestEndToEndAgentSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	repo := newE2ERepo(t)
	for _, refuse := range []bool{false, true} {
		home := t.TempDir()
		writeFakeProvider(t, home, agenttest.Script{ListSessions: true, ResumeSession: true, ResumeFails: refuse,
			Sessions: []agenttest.SessionInfo{
				{SessionID: "own-1", Cwd: repo, Title: "fix the parser", UpdatedAt: "2026-11-20T10:00:00Z"},
				{SessionID: "elsewhere", Cwd: "/somewhere/else"},
			}})
		d := startDaemon(t, bin, home)
		waitProviderReady(t, d, "fake")
		out, err := d.cli("session", "list", "--from-agent", "fake", "--repo", repo)
		if err != nil {
			t.Fatalf("session list --from-agent: %v\n%s\ndaemon log:\n%s", err, out, d.out)
		}
		if !strings.Contains(out, "own-1") || !strings.Contains(out, "fix the parser") || strings.Contains(out, "elsewhere") {
			t.Errorf("session list --from-agent:\n%s\nwant own-1 only", out)
		}
		out, err = d.cli("session", "new", "--repo", repo, "--agent", "fake", "--agent-session", "own-1")
		if err != nil {
			t.Fatalf("session new --agent-session: %v\n%s", err, out)
		}
		want := "fake took up its session own-1 (session/resume)"
		if refuse {
			want = "fake refused to take up its session own-1 and started a new one: session/resume failed: Resource not found: Session not found"
		}
		if !strings.Contains(out, want) {
			t.Errorf("refuse %v: session new says:\n%s\nwant %q", refuse, out, want)
		}
		// The agent is confined: the pool's tests check, through its call
		// log, that it was asked in the session's worktree.
		if ev := d.waitEvent(d.newSessionID(out), "agent.ready"); !strings.Contains(string(ev.Data), `"agent_session_id"`) {
			t.Errorf("agent.ready = %s", ev.Data)
		}
		if out, err := d.cli("session", "list", "--repo", repo); err == nil || !strings.Contains(out, "--repo goes with --from-agent") {
			t.Errorf("session list --repo alone = %v:\n%s", err, out)
		}
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	}
}
