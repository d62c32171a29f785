package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/worktree"
)

// TestHistoryIsAppendOnlyForAgents drives the real binary: a hostile
// agent rewrites the object of the base commit's README.md (content
// written under the old id, by rename, as it would in a store it can
// write) and moves another session's branch, then commits on its own.
// Before the session's own git view, the rewrite reached the user's
// checkout (git show HEAD:README.md printed the agent's text, a new
// session's worktree got it) and the other branch moved. Now the
// repository is as it was, fsck is clean, and the agent's own commit is
// on its branch after the turn.
func TestHistoryIsAppendOnlyForAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	f := newConfineFixture(t)
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", f.repo}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("branch", "agentpool/other")
	blob := git("rev-parse", "HEAD:README.md")
	other := git("rev-parse", "agentpool/other")
	obj := filepath.Join(f.repo, ".git", "objects", blob[:2], blob[2:])
	// A valid loose object with other content, written under the old id.
	forge := fmt.Sprintf(`f=%[1]s; printf 'defaced\n' > /tmp/x && forged=$(git hash-object -w /tmp/x) &&
cp "$(git rev-parse --git-path objects)/$(echo $forged | cut -c1-2)/$(echo $forged | cut -c3-)" "$f.new" && chmod u+w "$f" 2>/dev/null; mv -f "$f.new" "$f" && echo rewrote`, obj)
	steps := []agenttest.Step{
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", forge}}),
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", "git update-ref refs/heads/agentpool/other HEAD && echo moved"}}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: "agent.txt", Content: "mine\n"}),
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", "git add agent.txt && git commit -q -m 'agent commit' && git log -1 --format=%s"}}),
	}
	// Its second turn rewrites its own commit: not a fast-forward.
	amend := []agenttest.Step{
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", "git commit -q --amend -m rewritten && git log -1 --format=%s"}}),
	}
	f.writeProvider(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: steps}, {Steps: amend}}})
	d := f.start(t)
	waitProviderReady(t, d, "hostile")
	id, _ := f.session(t, d)
	got := results(t, d, id)
	if len(got) != 4 {
		t.Fatalf("%d results %+v; want 4\ndaemon log:\n%s", len(got), got, d.out)
	}
	if !strings.Contains(got[0].Detail, "rewrote") || !strings.Contains(got[3].Detail, "agent commit") {
		t.Fatalf("in its own view the agent rewrites and commits: %+v", got)
	}
	if show := git("show", "HEAD:README.md"); show != "# repo" {
		t.Errorf("git show HEAD:README.md in the user's checkout = %q; want the genuine text", show)
	}
	if got := git("rev-parse", "agentpool/other"); got != other {
		t.Errorf("another session's branch moved to %s; want %s", got, other)
	}
	if out, err := exec.Command("git", "-C", f.repo, "fsck", "--no-dangling").CombinedOutput(); err != nil {
		t.Errorf("git fsck: %v\n%s", err, out)
	}
	// The agent's own commit was imported at the turn's end.
	deadline := time.Now().Add(10 * time.Second)
	for {
		log := git("log", "--format=%s", "agentpool/"+id)
		if strings.Contains(log, "agent commit") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session's branch log = %q; want the agent's commit\ndaemon log:\n%s", log, d.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if h := turnHistory(t, d, id, 1); h.Commits != 1 || h.Refused != "" {
		t.Errorf("turn 1's history = %+v; want the agent's one commit taken", h)
	}
	if r := results(t, d, id); len(r) != 1 || !strings.Contains(r[0].Detail, "rewritten") {
		t.Fatalf("second turn: %+v", r)
	}
	if h := turnHistory(t, d, id, 2); h.Refused != worktree.RefusedNotFastForward {
		t.Errorf("turn 2's history = %+v; want its amended commit refused: %q", h, worktree.RefusedNotFastForward)
	}
	if log := git("log", "-1", "--format=%s", "agentpool/"+id); log == "rewritten" {
		t.Errorf("the session branch took the agent's rewrite of its own history")
	}
	if out, err := d.cli("events", id); err != nil || !strings.Contains(out, "agent's commits not taken") {
		t.Errorf("agentpool events = %v\n%s\nwant turn 2's refusal of the agent's commits", err, out)
	}
	if exe := browserIfAny(); exe != "" {
		// The page says it at the turn's end too.
		b := newBrowser(t, exe)
		b.run("desktop size", chromedp.EmulateViewport(1280, 800))
		browserLogin(t, b, d)
		b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+id))
		b.waitJS("the refusal at turn 2's end", `[...document.querySelectorAll('.stream .sys.bad')].some(e => e.textContent.includes("The agent's own commits were not taken onto the session branch: `+worktree.RefusedNotFastForward+`"))`)
		b.run("show it", js(`[...document.querySelectorAll('.stream .sys.bad')].find(e => e.textContent.includes("commits were not taken")).scrollIntoView({block: 'center'})`))
		t.Logf("screenshot: %s", b.shot("history-refused"))
	}
	// A new session's worktree has the genuine README.
	_, wt2 := f.session(t, d)
	if b, err := exec.Command("cat", filepath.Join(wt2, "README.md")).Output(); err != nil || string(b) != "# repo\n" {
		t.Errorf("a new session's README.md = %q, %v; want the genuine text", b, err)
	}
}

// turnHistory returns the "history" of turn n's turn.ended event.
func turnHistory(t *testing.T, d *daemon, id string, n int64) pool.HistoryImport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := d.client.EventLog(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type != backends.EventTurnEnded || ev.Turn != n {
			continue
		}
		var data struct {
			History pool.HistoryImport `json:"history"`
		}
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		return data.History
	}
	t.Fatalf("no turn.ended of turn %d", n)
	return pool.HistoryImport{}
}

// browserIfAny returns a Chromium to drive, "" when there is none (the
// test's browser part is then left out; findBrowser fails a CI run
// without one in the page tests).
func browserIfAny() string {
	if testing.Short() {
		return ""
	}
	for _, n := range browserNames {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}
