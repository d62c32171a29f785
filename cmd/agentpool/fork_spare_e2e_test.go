package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// TestEndToEndForkFromSpare forks a session while a spare of its
// repository and agent is ready: the spare becomes the fork. Its worktree
// is given the session's state (HEAD at the session's own commit, the
// same uncommitted work) or turn 1's with --turn; its stream is the
// session's history, then session.created, session.forked, and its
// agent's agent.ready (already running); its next turn carries the full
// briefing, numbered after the copied turns; the session is untouched.
func TestEndToEndForkFromSpare(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"forky": forkScript()})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"a.txt": "a0\n", "gone.txt": "to delete\n"})
	d := startDaemonArgs(t, bin, home, []string{"--max-warm", "8", "--spares", "forky=1", "--spares-repo", repo})
	head := spareGit(t, repo, "rev-parse", "HEAD")
	ctx := context.Background()
	d.waitSpares("ready", readySpares(1, head))
	src, err := d.client.CreateSession(ctx, pool.CreateRequest{ID: "source", Repo: repo, Agent: "forky"})
	if err != nil {
		t.Fatal(err)
	}
	wt := src.Worktree.Path
	writeIn(t, wt, "a.txt", "v1\n")
	if _, err := d.client.Prompt(ctx, src.ID, "", "first", true); err != nil {
		t.Fatal(err)
	}
	// The session's own commit: its HEAD is no longer the spare's base.
	writeIn(t, wt, "committed.txt", "on the session's branch\n")
	e2eGit(t, wt, "add", "committed.txt")
	e2eGit(t, wt, "commit", "-q", "-m", "the session's commit")
	if _, err := d.client.Prompt(ctx, src.ID, "", "second", true); err != nil {
		t.Fatal(err)
	}
	writeIn(t, wt, "a.txt", "v3 uncommitted\n")
	writeIn(t, wt, "new/untracked.txt", "new\n")
	if err := os.Remove(filepath.Join(wt, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	before := gitState(t, wt)
	srcEvents := eventsOf(t, d.client, src.ID)

	spares := d.waitSpares("ready again", readySpares(1, head))
	f, err := d.client.Fork(ctx, src.ID, httpapi.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if f.ID != spares[0].ID {
		t.Fatalf("fork = %s; want the spare %s adopted", f.ID, spares[0].ID)
	}
	if got := gitState(t, wt); got != before {
		t.Errorf("the forked session's git state changed:\nbefore %s\nafter  %s", before, got)
	}
	fwt := f.Worktree.Path
	if got, want := e2eGit(t, fwt, "rev-parse", "HEAD"), e2eGit(t, wt, "rev-parse", "HEAD"); got != want {
		t.Errorf("fork's HEAD = %s; want the session's own commit %s", got, want)
	}
	if got, want := e2eGit(t, fwt, "status", "--porcelain", "--untracked-files=all"), e2eGit(t, wt, "status", "--porcelain", "--untracked-files=all"); got != want {
		t.Errorf("fork's git status:\n%s\nwant the session's:\n%s", got, want)
	}
	for name, want := range map[string]string{"a.txt": "v3 uncommitted\n", "new/untracked.txt": "new\n", "committed.txt": "on the session's branch\n"} {
		if got := readIn(fwt, name); got != want {
			t.Errorf("fork's %s = %q; want %q", name, got, want)
		}
	}
	if f.Worktree.BaseCommit != src.Worktree.BaseCommit {
		t.Errorf("fork's base = %s; want the session's %s (its diffs start there)", f.Worktree.BaseCommit, src.Worktree.BaseCommit)
	}
	if f.LastTurn != 2 {
		t.Errorf("fork's last turn = %d; want 2, copied", f.LastTurn)
	}
	fevs := eventsOf(t, d.client, f.ID)
	checkSeqs(t, "fork", fevs)
	n := len(srcEvents)
	if len(fevs) < n+3 {
		t.Fatalf("fork has %d events; want the session's %d and more", len(fevs), n)
	}
	for i := range n {
		if fevs[i].Type != srcEvents[i].Type || fevs[i].Turn != srcEvents[i].Turn {
			t.Errorf("fork event %d = %s turn %d; want the session's %s turn %d", i+1, fevs[i].Type, fevs[i].Turn, srcEvents[i].Type, srcEvents[i].Turn)
		}
	}
	if fevs[n].Type != backends.EventSessionCreated || !strings.Contains(string(fevs[n].Data), `"spare":true`) ||
		fevs[n+1].Type != pool.EventSessionForked || !strings.Contains(string(fevs[n+1].Data), `"turns":2`) {
		t.Errorf("fork events after the history: %s %s, %s %s; want session.created from a spare, session.forked with 2 turns",
			fevs[n].Type, fevs[n].Data, fevs[n+1].Type, fevs[n+1].Data)
	}
	ready := false
	for _, ev := range fevs[n+2:] {
		ready = ready || ev.Type == backends.EventAgentReady
	}
	if !ready {
		t.Errorf("the fork's answer came before its agent.ready: the spare's agent runs already")
	}
	tr, err := d.client.Prompt(ctx, f.ID, "", "in the fork", true)
	if err != nil || tr.ID != 3 || tr.StopReason != "end_turn" {
		t.Fatalf("fork's prompt = %+v, %v; want turn 3, ended", tr, err)
	}
	briefed := false
	for _, ev := range eventsOf(t, d.client, f.ID) {
		if ev.Type == pool.EventTurnBriefing && ev.Turn == 3 {
			briefed = strings.Contains(string(ev.Data), "first") && strings.Contains(string(ev.Data), "second")
		}
	}
	if !briefed {
		t.Errorf("the fork's first turn had no briefing of the session's two turns")
	}

	// --turn 1 from a spare: turn 1's files on the session's base.
	d.waitSpares("ready a third time", readySpares(1, head))
	f1, err := d.client.Fork(ctx, src.ID, httpapi.ForkRequest{Turn: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f1.ID, pool.SpareIDPrefix) {
		t.Errorf("fork --turn 1 = %s; want a spare adopted", f1.ID)
	}
	if got := readIn(f1.Worktree.Path, "a.txt"); got != "v1\n" {
		t.Errorf("fork at turn 1 a.txt = %q; want v1", got)
	}
	if got := strings.TrimSpace(e2eGit(t, f1.Worktree.Path, "rev-parse", "HEAD")); got != head {
		t.Errorf("fork at turn 1 HEAD = %s; want the session's base %s", got, head)
	}
	if t1, err := d.client.Turns(ctx, f1.ID); err != nil || len(t1) != 1 || t1[0].Prompt != "first" {
		t.Errorf("fork at turn 1 turns = %+v, %v; want the first", t1, err)
	}
	if got := gitState(t, wt); got != before {
		t.Errorf("the forked session's git state changed by the second fork")
	}
}
