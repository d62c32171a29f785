package worktree

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRemovePreservesWork(t *testing.T) {
	ctx := context.Background()
	m, err := NewManager(Config{Root: t.TempDir(), Author: "Pool Bot", AuthorEmail: "bot@pool.test"})
	must(t, err)
	repo := newRepo(t, "repo", map[string]string{"a.txt": "a\n", "b.txt": "b\n", ".gitignore": "*.log\n"})
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "a.txt", "a modified\n")
	must(t, os.Remove(filepath.Join(wt.Path, "b.txt")))
	writeFile(t, wt.Path, "new/file.txt", "new work\n")
	writeFile(t, wt.Path, "staged.txt", "staged\n")
	gitT(t, wt.Path, "add", "staged.txt")
	writeFile(t, wt.Path, "x.log", "ignored\n")
	mainStatus := gitT(t, repo, "status", "--porcelain")

	res, err := m.Remove(ctx, wt, false)
	if err != nil {
		t.Fatalf("Remove(discard=false) error = %v", err)
	}
	tip := gitT(t, repo, "rev-parse", "agentpool/s")
	if !res.Committed || res.Commit != tip || res.Branch != "agentpool/s" || res.Discarded || res.Missing {
		t.Errorf("Remove() = %+v; want committed work at the branch tip %s", res, tip)
	}
	if exists(wt.Path) {
		t.Errorf("Remove() left the directory %s", wt.Path)
	}
	if out := gitT(t, repo, "worktree", "list", "--porcelain"); strings.Contains(out, wt.Path) {
		t.Errorf("Remove() left the registration:\n%s", out)
	}
	files := gitT(t, repo, "ls-tree", "-r", "--name-only", "agentpool/s")
	if want := ".gitignore\na.txt\nnew/file.txt\nstaged.txt"; files != want {
		t.Errorf("branch files = %q; want %q (new files kept, deletion recorded, ignored left out)", files, want)
	}
	for path, want := range map[string]string{"a.txt": "a modified", "new/file.txt": "new work", "staged.txt": "staged"} {
		if got := gitT(t, repo, "show", "agentpool/s:"+path); got != want {
			t.Errorf("branch %s = %q; want %q", path, got, want)
		}
	}
	if got := gitT(t, repo, "log", "-1", "--format=%an <%ae>|%cn|%P|%s", "agentpool/s"); got !=
		"Pool Bot <bot@pool.test>|Pool Bot|"+wt.BaseCommit+"|agentpool: keep the work of session s" {
		t.Errorf("preserving commit = %q; want the configured identity, the base as parent and a clear subject", got)
	}
	if got := gitT(t, repo, "status", "--porcelain"); got != mainStatus {
		t.Errorf("main checkout status = %q; want %q", got, mainStatus)
	}
	if exists(filepath.Dir(wt.Path)) {
		t.Errorf("empty namespace directory %s was left", filepath.Dir(wt.Path))
	}
}

func TestRemoveClean(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	other := create(t, m, "other", repo)
	cp, err := m.Checkpoint(context.Background(), wt)
	must(t, err)
	res, err := m.Remove(context.Background(), wt, false)
	if err != nil || res.Committed || res.Commit != "" || !res.BranchDeleted {
		t.Fatalf("Remove() of a clean worktree = %+v, %v; want no commit and its empty branch deleted", res, err)
	}
	if got := gitT(t, repo, "branch", "--list", "agentpool/s"); got != "" {
		t.Errorf("branch of a session without work = %q; want it deleted", got)
	}
	if got := gitT(t, repo, "rev-parse", CheckpointRefPrefix+"s^{tree}"); got != cp {
		t.Errorf("checkpoint chain after Remove() = %q; want it kept, at %s", got, cp)
	}
	if !exists(other.Path) {
		t.Errorf("Remove() of one worktree removed the namespace of another")
	}
}

// TestRemoveKeepsBranchesWithWork: a branch with a commit beyond the base
// (even one undone by a later commit), or checked out elsewhere, stays.
func TestRemoveKeepsBranchesWithWork(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	undone := create(t, m, "undone", repo)
	writeFile(t, undone.Path, "f.txt", "x\n")
	gitT(t, undone.Path, "add", "f.txt")
	gitT(t, undone.Path, "commit", "-q", "-m", "add")
	gitT(t, undone.Path, "rm", "-q", "f.txt")
	gitT(t, undone.Path, "commit", "-q", "-m", "remove")
	elsewhere := create(t, m, "elsewhere", repo)
	review := filepath.Join(t.TempDir(), "review")
	gitT(t, repo, "worktree", "add", "-q", "--force", review, "agentpool/elsewhere")
	for _, wt := range []Worktree{undone, elsewhere} {
		res, err := m.Remove(ctx, wt, false)
		if err != nil || res.BranchDeleted || res.Commit == "" {
			t.Errorf("Remove(%s) = %+v, %v; want its branch kept", wt.Session, res, err)
		}
		if got := gitT(t, repo, "branch", "--list", "agentpool/"+wt.Session); got == "" {
			t.Errorf("branch agentpool/%s was deleted", wt.Session)
		}
	}
}

func TestRemoveJoinsCommitsOffBranch(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "on-branch.txt", "1\n")
	gitT(t, wt.Path, "add", "-A")
	gitT(t, wt.Path, "commit", "-q", "-m", "on the session branch")
	onBranch := gitT(t, wt.Path, "rev-parse", "HEAD")
	// The agent wanders off to a detached HEAD, commits there and leaves
	// more work uncommitted.
	gitT(t, wt.Path, "checkout", "-q", "--detach", "HEAD~1")
	writeFile(t, wt.Path, "detached.txt", "2\n")
	gitT(t, wt.Path, "add", "-A")
	gitT(t, wt.Path, "commit", "-q", "-m", "on a detached HEAD")
	detached := gitT(t, wt.Path, "rev-parse", "HEAD")
	writeFile(t, wt.Path, "loose.txt", "3\n")

	res, err := m.Remove(context.Background(), wt, false)
	if err != nil || !res.Committed {
		t.Fatalf("Remove() = %+v, %v; want a preserving commit", res, err)
	}
	if got := gitT(t, repo, "log", "-1", "--format=%P", "agentpool/s"); got != onBranch+" "+detached {
		t.Errorf("preserving commit parents = %q; want the branch tip and the detached HEAD %s %s", got, onBranch, detached)
	}
	if got := gitT(t, repo, "ls-tree", "-r", "--name-only", "agentpool/s"); got != "README.md\ndetached.txt\nloose.txt" {
		t.Errorf("branch files = %q; want the worktree's state", got)
	}
}

func TestRemoveDiscard(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "secret.txt", "throw me away\n")
	if _, err := m.Checkpoint(ctx, wt); err != nil {
		t.Fatal(err)
	}
	res, err := m.Remove(ctx, wt, true)
	if err != nil || !res.Discarded || res.Committed || res.Commit != "" {
		t.Fatalf("Remove(discard=true) = %+v, %v; want discarded", res, err)
	}
	if exists(wt.Path) {
		t.Errorf("Remove(discard) left %s", wt.Path)
	}
	if refs := gitT(t, repo, "for-each-ref", "--format=%(refname)"); refs != "refs/heads/main" {
		t.Errorf("refs after Remove(discard) = %q; want only refs/heads/main", refs)
	}
	if out := gitT(t, repo, "log", "--all", "--format=%s"); out != "initial" {
		t.Errorf("history after Remove(discard) = %q; want only the initial commit", out)
	}
}

func TestRemoveMissing(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	for _, discard := range []bool{false, true} {
		session := map[bool]string{false: "keep", true: "drop"}[discard]
		wt := create(t, m, session, repo)
		writeFile(t, wt.Path, "work.txt", "work\n")
		gitT(t, wt.Path, "add", "work.txt")
		gitT(t, wt.Path, "commit", "-q", "-m", "work")
		must(t, os.RemoveAll(wt.Path))
		res, err := m.Remove(ctx, wt, discard)
		if err != nil || !res.Missing || res.Discarded != discard {
			t.Fatalf("Remove(%s, discard=%v) of a deleted directory = %+v, %v; want Missing", session, discard, res, err)
		}
		if out := gitT(t, repo, "worktree", "list", "--porcelain"); strings.Contains(out, wt.Path) {
			t.Errorf("stale registration of %s left:\n%s", wt.Path, out)
		}
		branches := gitT(t, repo, "branch", "--list", "agentpool/"+session)
		if (branches != "") == discard {
			t.Errorf("after Remove(discard=%v) branch list = %q", discard, branches)
		}
	}
}

func TestRemoveDiscardKeepsBranchCheckedOutElsewhere(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	review := filepath.Join(t.TempDir(), "review")
	gitT(t, repo, "worktree", "add", "-q", "--force", review, "agentpool/s")
	if _, err := m.Remove(context.Background(), wt, true); err == nil || !strings.Contains(err.Error(), review) {
		t.Fatalf("Remove(discard) of a branch checked out at %s error = %v; want an error naming it", review, err)
	}
	if got := gitT(t, repo, "branch", "--list", "agentpool/s"); got == "" {
		t.Errorf("branch checked out elsewhere was deleted")
	}
}

func TestRemoveRefusesForeignWorktree(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	other := newRepo(t, "other", nil)
	wt := create(t, m, "s", other)
	writeFile(t, wt.Path, "work.txt", "mine\n")
	foreign := wt
	foreign.Repo = repo
	if _, err := m.Remove(context.Background(), foreign, true); err == nil {
		t.Fatalf("Remove() of a worktree of another repository succeeded")
	}
	if got := readFile(t, wt.Path, "work.txt"); got != "mine\n" {
		t.Errorf("foreign worktree file = %q; want untouched", got)
	}
}
