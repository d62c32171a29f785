package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// forkScript is a demo agent whose first two prompts answer at once and
// whose later ones take a while, so that a test can fork a session while
// its turn runs.
func forkScript() map[string]any {
	return map[string]any{"agent_name": "forky", "turns": []any{
		map[string]any{"steps": []any{map[string]any{"chunk": "one\n"}}},
		map[string]any{"steps": []any{map[string]any{"chunk": "two\n"}}},
		map[string]any{"steps": []any{map[string]any{"sleep_ms": 2500}, map[string]any{"chunk": "slow\n"}}},
	}}
}

// gitState is what a fork must leave alone of its source's worktree.
func gitState(t *testing.T, dir string) string {
	t.Helper()
	return e2eGit(t, dir, "status", "--porcelain", "--untracked-files=all") + "HEAD " + e2eGit(t, dir, "rev-parse", "HEAD") +
		"index " + e2eGit(t, dir, "ls-files", "--stage")
}

func writeIn(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readIn(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// forkedID reads the id `session fork` printed.
func forkedID(t *testing.T, out string) string {
	t.Helper()
	m := regexp.MustCompile(`session (\S+) forked from`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("session fork output has no id:\n%s", out)
	}
	return m[1]
}

// TestEndToEndFork forks a session through the CLI and the API: the fork
// has the session's uncommitted work (a change, a new untracked file, a
// deletion), or turn N's state with --turn, and its history with its own
// seqs and a session.forked event; the session is untouched and keeps
// working, also when it is forked while its turn runs; bad requests are
// refused naming their field, leaving nothing behind.
func TestEndToEndFork(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"forky": forkScript(), "other": forkScript()})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{
		"a.txt": "a0\n", "gone.txt": "to delete\n", ".gitignore": "*.log\n",
	})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	src := d.newSessionWith(repo, "forky")
	ss, err := d.client.Session(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	wt := ss.Worktree.Path

	// Turn 1 sees a.txt = v1; turn 2 v2.
	writeIn(t, wt, "a.txt", "v1\n")
	if _, err := d.client.Prompt(ctx, src, "", "first", true); err != nil {
		t.Fatal(err)
	}
	writeIn(t, wt, "a.txt", "v2\n")
	if _, err := d.client.Prompt(ctx, src, "", "second", true); err != nil {
		t.Fatal(err)
	}
	// Uncommitted now: a change, a new file, a deletion, an ignored file.
	writeIn(t, wt, "a.txt", "v3 uncommitted\n")
	writeIn(t, wt, "new/untracked.txt", "new\n")
	writeIn(t, wt, "debug.log", "ignored\n")
	if err := os.Remove(filepath.Join(wt, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	before := gitState(t, wt)
	srcEvents := eventsOf(t, d.client, src)

	out, err := d.cli("session", "fork", src)
	if err != nil {
		t.Fatalf("session fork: %v\n%s", err, out)
	}
	fid := forkedID(t, out)
	if !strings.Contains(out, "2 turns of "+src) {
		t.Errorf("session fork output:\n%s\nwant the history it copied", out)
	}
	if got := gitState(t, wt); got != before {
		t.Errorf("the forked session's git state changed:\nbefore %s\nafter  %s", before, got)
	}
	fs, err := d.client.Session(ctx, fid)
	if err != nil {
		t.Fatal(err)
	}
	fwt := fs.Worktree.Path
	if fwt == wt || fs.Worktree.Branch != "agentpool/"+fid || fs.ActiveAgent != "forky" {
		t.Errorf("fork = %+v; want its own worktree and branch, the session's agent", fs.Worktree)
	}
	for name, want := range map[string]string{"a.txt": "v3 uncommitted\n", "new/untracked.txt": "new\n"} {
		if got := readIn(fwt, name); got != want {
			t.Errorf("fork's %s = %q; want %q", name, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(fwt, "gone.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fork has gone.txt (%v); the session deleted it", err)
	}
	if _, err := os.Stat(filepath.Join(fwt, "debug.log")); err == nil {
		t.Errorf("fork has the ignored debug.log")
	}
	if got, want := e2eGit(t, fwt, "status", "--porcelain", "--untracked-files=all"), e2eGit(t, wt, "status", "--porcelain", "--untracked-files=all"); got != want {
		t.Errorf("fork's git status:\n%s\nwant the session's:\n%s", got, want)
	}
	if got, want := e2eGit(t, fwt, "rev-parse", "HEAD"), e2eGit(t, wt, "rev-parse", "HEAD"); got != want {
		t.Errorf("fork's HEAD = %s; want the session's %s", got, want)
	}

	// The fork's history: the session's events with its own seqs, then
	// its session.created and session.forked.
	d.waitEvent(fid, backends.EventAgentReady)
	fevs := eventsOf(t, d.client, fid)
	checkSeqs(t, "fork", fevs)
	n := len(srcEvents)
	if len(fevs) < n+2 {
		t.Fatalf("fork has %d events; want the session's %d and more", len(fevs), n)
	}
	for i := 0; i < n; i++ {
		if fevs[i].Type != srcEvents[i].Type || fevs[i].Turn != srcEvents[i].Turn || fevs[i].Session != fid {
			t.Errorf("fork event %d = %s turn %d of %s; want the session's %s turn %d", i+1, fevs[i].Type, fevs[i].Turn, fevs[i].Session, srcEvents[i].Type, srcEvents[i].Turn)
		}
	}
	if fevs[n].Type != backends.EventSessionCreated || fevs[n+1].Type != pool.EventSessionForked ||
		!strings.Contains(string(fevs[n+1].Data), `"from":"`+src+`"`) {
		t.Errorf("fork events after the history: %s %s %s; want session.created, session.forked from %s", fevs[n].Type, fevs[n+1].Type, fevs[n+1].Data, src)
	}
	fturns, err := d.client.Turns(ctx, fid)
	if err != nil || len(fturns) != 2 || fturns[0].Prompt != "first" || fturns[1].Prompt != "second" {
		t.Fatalf("fork's turns = %+v, %v; want the session's two", fturns, err)
	}
	// Both go on: the fork's next turn is 3, and the session's too.
	if tr, err := d.client.Prompt(ctx, fid, "", "in the fork", true); err != nil || tr.ID != 3 || tr.StopReason != "end_turn" {
		t.Errorf("fork's prompt = %+v, %v; want turn 3, ended", tr, err)
	}

	// A fork while the session's turn runs: the turn goes on undisturbed.
	running, err := d.client.Prompt(ctx, src, "", "third, slow", false)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the session's slow turn to run", func() bool {
		s, err := d.client.Session(ctx, src)
		return err == nil && s.Busy
	})
	midTurn := gitState(t, wt)
	start := time.Now()
	f2, err := d.client.Fork(ctx, src, httpapi.ForkRequest{Agent: "other", Title: "mid-turn"})
	if err != nil {
		t.Fatalf("fork while a turn runs: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the fork took %v while the turn ran: was it waiting for the turn?", took)
	}
	if s, _ := d.client.Session(ctx, src); !s.Busy {
		t.Errorf("the session's turn ended before the fork returned; the test proves nothing")
	}
	if got := gitState(t, wt); got != midTurn {
		t.Errorf("the fork changed the session's git state mid-turn")
	}
	if f2.ActiveAgent != "other" || f2.Title != "mid-turn" || f2.LastTurn != 2 {
		t.Errorf("mid-turn fork = agent %s title %q last turn %d; want other, mid-turn, 2 (the running turn is not copied)", f2.ActiveAgent, f2.Title, f2.LastTurn)
	}
	for _, ev := range eventsOf(t, d.client, f2.ID) {
		if ev.Turn == running.ID && ev.Turn != 0 {
			t.Errorf("mid-turn fork has an event of the running turn: %s", ev.Type)
		}
	}
	ended, err := d.client.Turn(ctx, src, running.ID, true)
	if err != nil || ended.StopReason != "end_turn" || ended.Error != "" {
		t.Errorf("the session's turn forked mid-way ended %+v, %v; want end_turn", ended, err)
	}

	// --turn 1: turn 1's state and the history up to it.
	out, err = d.cli("session", "fork", src, "--turn", "1")
	if err != nil {
		t.Fatalf("session fork --turn 1: %v\n%s", err, out)
	}
	f3 := forkedID(t, out)
	s3, err := d.client.Session(ctx, f3)
	if err != nil {
		t.Fatal(err)
	}
	if got := readIn(s3.Worktree.Path, "a.txt"); got != "v1\n" {
		t.Errorf("fork at turn 1 a.txt = %q; want v1", got)
	}
	if _, err := os.Stat(filepath.Join(s3.Worktree.Path, "gone.txt")); err != nil {
		t.Errorf("fork at turn 1 lacks gone.txt, deleted after it: %v", err)
	}
	t3, err := d.client.Turns(ctx, f3)
	if err != nil || len(t3) != 1 || t3[0].Prompt != "first" {
		t.Errorf("fork at turn 1 turns = %+v, %v; want the first", t3, err)
	}
	for _, ev := range eventsOf(t, d.client, f3) {
		if ev.Turn > 1 {
			t.Errorf("fork at turn 1 has an event of turn %d: %s", ev.Turn, ev.Type)
		}
		if ev.Type == pool.EventSessionForked && !strings.Contains(string(ev.Data), `"turn":1`) {
			t.Errorf("session.forked = %s; want turn 1", ev.Data)
		}
	}

	// Bad input: 4xx naming the field, nothing made.
	sessionsBefore, _ := d.client.Sessions(ctx)
	branchesBefore := e2eGit(t, repo, "branch", "--list", "agentpool/*")
	for _, c := range []struct {
		session string
		req     httpapi.ForkRequest
		status  int
		field   string
	}{
		{"nope", httpapi.ForkRequest{}, 404, ""},
		{src, httpapi.ForkRequest{Turn: 99}, 400, "turn"},
		{src, httpapi.ForkRequest{Turn: -1}, 400, "turn"},
		{src, httpapi.ForkRequest{Agent: "no-such-agent"}, 404, "agent"},
	} {
		_, err := d.client.Fork(ctx, c.session, c.req)
		var he *httpapi.Error
		if !errors.As(err, &he) || he.Status != c.status || he.Field != c.field {
			t.Errorf("Fork(%s, %+v) error = %v; want %d naming %q", c.session, c.req, err, c.status, c.field)
		}
	}
	if out, err := d.cli("session", "fork", src, "--turn", "99"); err == nil || !strings.Contains(out, "turn 99") {
		t.Errorf("session fork --turn 99 = %v\n%s; want an error naming the turn", err, out)
	}
	sessionsAfter, _ := d.client.Sessions(ctx)
	if len(sessionsAfter) != len(sessionsBefore) {
		t.Errorf("failed forks left sessions: %d before, %d after", len(sessionsBefore), len(sessionsAfter))
	}
	if got := e2eGit(t, repo, "branch", "--list", "agentpool/*"); got != branchesBefore {
		t.Errorf("failed forks left branches:\n%s\nwant\n%s", got, branchesBefore)
	}
}

// TestMCPForkSession: the MCP tool fork_session forks a session with its
// uncommitted work and history; a bad turn is a tool error naming it.
func TestMCPForkSession(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"forky": forkScript()})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"a.txt": "a0\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	src := d.newSessionWith(repo, "forky")
	ss, err := d.client.Session(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, src, "", "first", true); err != nil {
		t.Fatal(err)
	}
	writeIn(t, ss.Worktree.Path, "a.txt", "uncommitted\n")
	c := startMCP(t, bin, home, repo)

	text, sc := c.call("fork_session", map[string]any{"session": src, "title": "via mcp"}, nil, false)
	fid, _ := sc["id"].(string)
	if fid == "" || fid == src || !strings.Contains(text, "Forked session "+src) || !strings.Contains(text, "1 turn of history") {
		t.Fatalf("fork_session = %q, %v; want the new session", text, sc)
	}
	fs, err := d.client.Session(ctx, fid)
	if err != nil {
		t.Fatal(err)
	}
	if got := readIn(fs.Worktree.Path, "a.txt"); got != "uncommitted\n" || fs.Title != "via mcp" {
		t.Errorf("fork's a.txt = %q, title %q; want the session's uncommitted change, via mcp", got, fs.Title)
	}
	if text, _ := c.call("fork_session", map[string]any{"session": src, "turn": 5}, nil, true); !strings.Contains(text, "turn 5") {
		t.Errorf("fork_session turn 5 error = %q; want it to name the turn", text)
	}
}
