package worktree

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// unknownSummary is what the tests compare of a Found.
type unknownSummary struct {
	Branch              string
	OnDisk, InGit       bool
	Pruned, HasNote     bool
	CommitOnSessionTree bool
}

func summarize(rep Report) map[string]unknownSummary {
	out := map[string]unknownSummary{}
	for _, f := range rep.Unknown {
		out[f.Session] = unknownSummary{Branch: f.Branch, OnDisk: f.OnDisk, InGit: f.InGit, Pruned: f.Pruned, HasNote: f.Note != ""}
	}
	return out
}

func TestReconcile(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	a, b, c := create(t, m, "a", repo), create(t, m, "b", repo), create(t, m, "c", repo)
	// b: its work is committed, then its directory is deleted by hand.
	writeFile(t, b.Path, "b.txt", "committed in b\n")
	gitT(t, b.Path, "add", "-A")
	gitT(t, b.Path, "commit", "-q", "-m", "work in b")
	must(t, os.RemoveAll(b.Path))
	// d: on disk and in git, unknown to the database, with uncommitted work.
	d := create(t, m, "d", repo)
	writeFile(t, d.Path, "d.txt", "uncommitted in d\n")
	// e: registered in git, directory gone, unknown to the database.
	e := create(t, m, "e", repo)
	must(t, os.RemoveAll(e.Path))
	// stray: a directory under the root that git does not know.
	stray := filepath.Join(filepath.Dir(a.Path), "stray")
	writeFile(t, stray, "notes.txt", "someone's notes\n")
	// The user's own worktree, outside the root: none of our business.
	mine := filepath.Join(t.TempDir(), "mine")
	gitT(t, repo, "worktree", "add", "-q", "-b", "feature", mine)
	// A known worktree whose repository is gone.
	bad := Worktree{Session: "bad", Repo: filepath.Join(t.TempDir(), "vanished"), Path: filepath.Join(m.Root(), "x", "bad"), Branch: "agentpool/bad"}
	known := []Worktree{a, bad, b, c}

	rep, err := m.Reconcile(ctx, known, false)
	if err != nil {
		t.Fatalf("Reconcile(prune=false) error = %v", err)
	}
	if diff := cmp.Diff([]Worktree{a, c}, rep.Present); diff != "" {
		t.Errorf("Reconcile().Present (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Worktree{b}, rep.Missing); diff != "" {
		t.Errorf("Reconcile().Missing (-want +got):\n%s", diff)
	}
	wantUnknown := map[string]unknownSummary{
		"d":     {Branch: "agentpool/d", OnDisk: true, InGit: true},
		"e":     {Branch: "agentpool/e", InGit: true},
		"stray": {OnDisk: true, HasNote: true},
	}
	if diff := cmp.Diff(wantUnknown, summarize(rep)); diff != "" {
		t.Errorf("Reconcile().Unknown (-want +got):\n%s", diff)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].Session != "bad" || !errors.Is(rep.Problems[0].Err, ErrNotRepository) {
		t.Errorf("Reconcile().Problems = %+v; want one ErrNotRepository for session bad", rep.Problems)
	}
	if readFile(t, d.Path, "d.txt") != "uncommitted in d\n" || !strings.Contains(gitT(t, repo, "worktree", "list"), e.Path) {
		t.Errorf("Reconcile(prune=false) changed something")
	}

	// Missing: re-created from its branch on demand.
	got, err := m.Recreate(ctx, b)
	if err != nil || got != b {
		t.Fatalf("Recreate(b) = %+v, %v; want %+v", got, err, b)
	}
	if readFile(t, b.Path, "b.txt") != "committed in b\n" || gitT(t, b.Path, "symbolic-ref", "HEAD") != "refs/heads/agentpool/b" {
		t.Errorf("Recreate(b) did not restore the branch's work on the branch")
	}
	if _, err := m.Recreate(ctx, b); !errors.Is(err, ErrExists) {
		t.Errorf("Recreate(b) of a present worktree error = %v; want ErrExists", err)
	}

	rep, err = m.Reconcile(ctx, []Worktree{a, b, c}, true)
	if err != nil {
		t.Fatalf("Reconcile(prune=true) error = %v", err)
	}
	wantUnknown["d"] = unknownSummary{Branch: "agentpool/d", OnDisk: true, InGit: true, Pruned: true}
	wantUnknown["e"] = unknownSummary{Branch: "agentpool/e", InGit: true, Pruned: true}
	if diff := cmp.Diff(wantUnknown, summarize(rep)); diff != "" {
		t.Errorf("Reconcile(prune=true).Unknown (-want +got):\n%s", diff)
	}
	if len(rep.Present) != 3 || len(rep.Missing) != 0 || len(rep.Problems) != 0 {
		t.Errorf("Reconcile(prune=true) = %d present, %d missing, problems %v; want 3, 0, none", len(rep.Present), len(rep.Missing), rep.Problems)
	}
	if exists(d.Path) {
		t.Errorf("pruned worktree %s still on disk", d.Path)
	}
	if got := gitT(t, repo, "show", "agentpool/d:d.txt"); got != "uncommitted in d" {
		t.Errorf("pruned worktree's work on its branch = %q; want it preserved", got)
	}
	list := gitT(t, repo, "worktree", "list", "--porcelain")
	if strings.Contains(list, e.Path) || strings.Contains(list, d.Path) || !strings.Contains(list, mine) {
		t.Errorf("after pruning, git worktree list =\n%s\nwant d and e gone, the user's %s kept", list, mine)
	}
	if readFile(t, stray, "notes.txt") != "someone's notes\n" {
		t.Errorf("prune deleted a directory git does not know")
	}

	rep, err = m.Reconcile(ctx, []Worktree{a, b, c}, true)
	if err != nil || len(rep.Unknown) != 1 || rep.Unknown[0].Path != stray {
		t.Errorf("third Reconcile() = %+v, %v; want only the stray directory unknown", rep, err)
	}
}

func TestRecreateWithoutBranch(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	must(t, os.RemoveAll(wt.Path))
	gitT(t, repo, "worktree", "prune")
	gitT(t, repo, "branch", "-D", "agentpool/s")
	if _, err := m.Recreate(ctx, wt); !errors.Is(err, ErrMissing) {
		t.Fatalf("Recreate() without its branch error = %v; want ErrMissing", err)
	}
	if exists(wt.Path) {
		t.Errorf("failed Recreate left %s", wt.Path)
	}
}

func TestReconcileFindsRepositoriesFromDisk(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo1, repo2 := newRepo(t, "one", nil), newRepo(t, "two", nil)
	w1, w2 := create(t, m, "s1", repo1), create(t, m, "s2", repo2)
	// The database lost everything: the disk still leads to both repositories.
	rep, err := m.Reconcile(ctx, nil, false)
	if err != nil {
		t.Fatalf("Reconcile(nil) error = %v", err)
	}
	got := map[string]string{}
	for _, f := range rep.Unknown {
		if !f.OnDisk || !f.InGit || f.Pruned {
			t.Errorf("Reconcile(nil) found %+v; want on disk, in git, not pruned", f)
		}
		got[f.Path] = f.Repo
	}
	if want := map[string]string{w1.Path: repo1, w2.Path: repo2}; !cmp.Equal(want, got) {
		t.Errorf("Reconcile(nil) unknown worktrees = %v; want %v", got, want)
	}
	if !exists(w1.Path) || !exists(w2.Path) {
		t.Errorf("Reconcile(prune=false) removed a worktree")
	}
}
