package pool_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// TestClosedSessionsStayReadableThenPrune: a closed session's turns, diffs
// and events stay readable; one that did no work leaves no branch; Prune
// forgets the sessions closed long enough ago, their checkpoints and empty
// branches, and a branch with commits only when asked.
func TestClosedSessionsStayReadableThenPrune(t *testing.T) {
	writer := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Write: &agenttest.FileOp{Path: "new.txt", Content: "work {{prompt}}"}}}}}}
	// The store stamps the close with the real clock: the pool's starts there.
	clock := &fakeClock{now: time.Now()}
	e := newEnv(t, map[string]any{"w": providerEntry(writer)}, func(c *pool.Config) { c.Now = clock.Now })
	ctx := context.Background()
	worked, idle, open := e.session("w"), e.session("w"), e.session("w")
	e.prompt(worked.ID, "", "done")
	e.prompt(open.ID, "", "open")

	res, err := e.p.Close(ctx, worked.ID, false)
	if err != nil || !res.Worktree.Committed || res.Worktree.BranchDeleted {
		t.Fatalf("Close(worked) = %+v, %v; want the work committed, the branch kept", res, err)
	}
	res, err = e.p.Close(ctx, idle.ID, false)
	if err != nil || res.Worktree.Committed || !res.Worktree.BranchDeleted {
		t.Fatalf("Close(idle) = %+v, %v; want its empty branch deleted", res, err)
	}
	if out := git(t, e.repo, "branch", "--list", idle.Worktree.Branch); out != "" {
		t.Errorf("branch of the session without work = %q; want it deleted", out)
	}

	// Closed, still readable.
	for _, turn := range []int64{1, 0} {
		d, err := e.p.Diff(ctx, worked.ID, turn)
		if err != nil || len(d.Files) != 1 || d.Files[0].Path != "new.txt" {
			t.Errorf("Diff(closed, turn %d) = %+v, %v; want new.txt", turn, d.Files, err)
		}
	}
	if d, err := e.p.Diff(ctx, idle.ID, 0); err != nil || len(d.Files) != 0 {
		t.Errorf("Diff(closed without work) = %+v, %v; want no change", d.Files, err)
	}
	if turns, err := e.p.Turns(ctx, worked.ID); err != nil || len(turns) != 1 || turns[0].ID != 1 {
		t.Errorf("Turns(closed) = %+v, %v; want turn 1", turns, err)
	}
	if evs := e.events(worked.ID); countType(evs, backends.EventTurnEnded) != 1 || countType(evs, backends.EventSessionClosed) != 1 {
		t.Errorf("events of the closed session: %v", typesOf(evs))
	}

	clock.Add(48 * time.Hour)
	if r, err := e.p.Prune(ctx, pool.PruneRequest{OlderThan: 72 * time.Hour}); err != nil || len(r.Sessions) != 0 {
		t.Errorf("Prune(older than 72h) = %+v, %v; want nothing selected", r, err)
	}
	dry, err := e.p.Prune(ctx, pool.PruneRequest{OlderThan: 24 * time.Hour, DryRun: true})
	if err != nil || len(dry.Sessions) != 2 {
		t.Fatalf("Prune(dry run) = %+v, %v; want the two closed sessions", dry, err)
	}
	if _, err := e.p.Get(ctx, worked.ID); err != nil {
		t.Errorf("Get(worked) after a dry run error = %v; want it still there", err)
	}

	r, err := e.p.Prune(ctx, pool.PruneRequest{OlderThan: 24 * time.Hour})
	if err != nil || len(r.Sessions) != 2 {
		t.Fatalf("Prune() = %+v, %v; want the two closed sessions", r, err)
	}
	byID := map[string]pool.PrunedSession{}
	for _, s := range r.Sessions {
		byID[s.Session] = s
		if !s.Pruned || s.Error != "" {
			t.Errorf("Prune() of %s = %+v; want pruned", s.Session, s)
		}
	}
	if !byID[worked.ID].Branch.CheckpointsDeleted {
		t.Errorf("Prune() of the session with a turn = %+v; want its checkpoints deleted", byID[worked.ID])
	}
	if b := byID[worked.ID].Branch; b.Deleted || b.Kept == "" || b.Commits != 1 || b.Head == "" {
		t.Errorf("Prune() of the session with work: branch %+v; want it kept, with its head and 1 commit", b)
	}
	if b := byID[idle.ID].Branch; b.Head != "" || b.Deleted {
		t.Errorf("Prune() of the session without work: branch %+v; want none (deleted at close)", b)
	}
	for _, id := range []string{worked.ID, idle.ID} {
		if _, err := e.p.Get(ctx, id); err == nil {
			t.Errorf("Get(%s) after Prune() error = nil; want not found", id)
		}
	}
	if _, err := e.p.Get(ctx, open.ID); err != nil {
		t.Errorf("Get(open) after Prune() error = %v; want it untouched", err)
	}
	if refs := git(t, e.repo, "for-each-ref", "--format=%(refname)"); !strings.Contains(refs, worked.Worktree.Branch) ||
		strings.Contains(refs, "checkpoints/"+worked.ID) || !strings.Contains(refs, "checkpoints/"+open.ID) {
		t.Errorf("refs after Prune() =\n%s\nwant the worked branch, no checkpoints of the pruned session, the open one's", refs)
	}

	// With Branches, a pruned session's branch goes too.
	if _, err := e.p.Close(ctx, open.ID, false); err != nil {
		t.Fatal(err)
	}
	r, err = e.p.Prune(ctx, pool.PruneRequest{Branches: true})
	if err != nil || len(r.Sessions) != 1 || !r.Sessions[0].Branch.Deleted || r.Sessions[0].Branch.Head == "" {
		t.Fatalf("Prune(Branches) = %+v, %v; want the last session's branch deleted, with its head", r, err)
	}
	if out := git(t, e.repo, "branch", "--list", open.Worktree.Branch); out != "" {
		t.Errorf("branch after Prune(Branches) = %q; want it deleted", out)
	}
}
