package worktree

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiffAfterRemove: once the worktree is gone, its checkpoints and its
// branch can still be compared; the live state cannot.
func TestDiffAfterRemove(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", map[string]string{"a.txt": "a\n"})
	wt := create(t, m, "s", repo)
	before, err := m.Checkpoint(ctx, wt)
	must(t, err)
	writeFile(t, wt.Path, "a.txt", "changed\n")
	after, err := m.Checkpoint(ctx, wt)
	must(t, err)
	res, err := m.Remove(ctx, wt, false)
	if err != nil || !res.Committed {
		t.Fatalf("Remove() = %+v, %v; want the work committed", res, err)
	}
	for _, tt := range []struct{ name, from, to string }{
		{"turn", before, after},
		{"session", "", "refs/heads/" + res.Branch},
	} {
		d, err := m.Diff(ctx, wt, tt.from, tt.to)
		if err != nil || len(d.Files) != 1 || d.Files[0].Path != "a.txt" || !strings.Contains(d.Patch, "+changed") {
			t.Errorf("Diff(%s) after Remove() = %+v, %v; want a.txt changed", tt.name, d, err)
		}
	}
	if _, err := m.Diff(ctx, wt, before, ""); !errors.Is(err, ErrMissing) {
		t.Errorf("Diff(live) after Remove() error = %v; want ErrMissing", err)
	}
}

func TestPrune(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	refs := func() string { return gitT(t, repo, "for-each-ref", "--format=%(refname)") }

	// A session that committed work: its checkpoints go, its branch stays
	// unless asked.
	worked := create(t, m, "worked", repo)
	_, err := m.Checkpoint(ctx, worked)
	must(t, err)
	writeFile(t, worked.Path, "w.txt", "work\n")
	_, err = m.Checkpoint(ctx, worked)
	must(t, err)
	if _, err := m.Prune(ctx, worked, PruneOptions{}); !errors.Is(err, ErrExists) {
		t.Fatalf("Prune() of a worktree still in place error = %v; want ErrExists", err)
	}
	rm, err := m.Remove(ctx, worked, false)
	must(t, err)

	dry, err := m.Prune(ctx, worked, PruneOptions{Branch: true, DryRun: true})
	want := PruneResult{Branch: "agentpool/worked", Head: rm.Commit, Commits: 1, BranchDeleted: true, CheckpointsDeleted: true}
	if err != nil || dry != want {
		t.Errorf("Prune(dry run) = %+v, %v; want %+v", dry, err, want)
	}
	if got := refs(); !strings.Contains(got, "refs/heads/agentpool/worked") || !strings.Contains(got, CheckpointRefPrefix+"worked") {
		t.Fatalf("refs after a dry run = %q; want nothing deleted", got)
	}
	kept, err := m.Prune(ctx, worked, PruneOptions{})
	want = PruneResult{Branch: "agentpool/worked", Head: rm.Commit, Commits: 1, BranchKept: KeptHasCommits, CheckpointsDeleted: true}
	if err != nil || kept != want {
		t.Errorf("Prune() = %+v, %v; want %+v", kept, err, want)
	}
	if got := refs(); !strings.Contains(got, "refs/heads/agentpool/worked") || strings.Contains(got, CheckpointRefPrefix) {
		t.Errorf("refs after Prune() = %q; want the branch, no checkpoints", got)
	}
	del, err := m.Prune(ctx, worked, PruneOptions{Branch: true})
	want = PruneResult{Branch: "agentpool/worked", Head: rm.Commit, Commits: 1, BranchDeleted: true}
	if err != nil || del != want {
		t.Errorf("Prune(Branch) = %+v, %v; want %+v", del, err, want)
	}
	if got := refs(); got != "refs/heads/main" {
		t.Errorf("refs after Prune(Branch) = %q; want only main", got)
	}
	gitT(t, repo, "branch", "restored", del.Head) // what the user is told to do
	if got := gitT(t, repo, "show", "restored:w.txt"); got != "work" {
		t.Errorf("w.txt of the branch restored from its head = %q", got)
	}

	// An empty branch is deleted without asking, unless checked out.
	for _, tt := range []struct {
		session string
		review  bool
	}{{"empty", false}, {"looked-at", true}} {
		wt := create(t, m, tt.session, repo)
		must(t, os.RemoveAll(wt.Path))
		gitT(t, repo, "worktree", "prune")
		if tt.review {
			gitT(t, repo, "worktree", "add", "-q", filepath.Join(t.TempDir(), "review"), "agentpool/"+tt.session)
		}
		res, err := m.Prune(ctx, wt, PruneOptions{})
		if err != nil || res.Commits != 0 || res.BranchDeleted == tt.review || (res.BranchKept != "") != tt.review {
			t.Errorf("Prune(%s) = %+v, %v; want its branch deleted unless checked out", tt.session, res, err)
		}
	}

	// A repository that is gone has nothing left to prune.
	gone := create(t, m, "gone", newRepo(t, "gone", nil))
	must(t, os.RemoveAll(gone.Path))
	must(t, os.RemoveAll(gone.Repo))
	if res, err := m.Prune(ctx, gone, PruneOptions{}); err != nil || !res.RepoMissing {
		t.Errorf("Prune() in a deleted repository = %+v, %v; want RepoMissing", res, err)
	}
}
