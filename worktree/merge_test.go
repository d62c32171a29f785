package worktree

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// branchTip returns the commit of a local branch, or "" if it is absent.
func branchTip(t *testing.T, repo, branch string) string {
	t.Helper()
	out, err := gitRaw(repo, nil, "rev-parse", "-q", "--verify", "refs/heads/"+branch)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// commitOn commits files on branch of repo without touching its checkout.
func commitOn(t *testing.T, repo, branch string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "side")
	gitT(t, repo, "worktree", "add", "-q", dir, branch)
	for name, content := range files {
		writeFile(t, dir, name, content)
	}
	gitT(t, dir, "add", "-A")
	gitT(t, dir, "commit", "-q", "-m", "side commit on "+branch)
	gitT(t, repo, "worktree", "remove", "--force", dir)
	return branchTip(t, repo, branch)
}

func TestMergeFastForwardIntoCheckedOutBase(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	marker := filepath.Join(t.TempDir(), "post-merge-ran")
	must(t, os.WriteFile(filepath.Join(repo, ".git", "hooks", "post-merge"), []byte("#!/bin/sh\ntouch '"+marker+"'\n"), 0o755))
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "a.txt", "from the agent\n")
	gitT(t, wt.Path, "add", "a.txt") // staged by the agent: the index must not keep it
	before := branchTip(t, repo, "main")

	res, err := m.Merge(ctx, wt, MergeOptions{})
	if err != nil {
		t.Fatalf("Merge() error = %v", err)
	}
	if !res.Committed || res.Method != MergeFastForward || res.Into != "main" || res.Before != before || res.Head != res.WorkCommit {
		t.Errorf("Merge() = %+v; want the work committed and main fast-forwarded to it", res)
	}
	if res.WorkingTree != repo || readFile(t, repo, "a.txt") != "from the agent\n" {
		t.Errorf("main checkout: WorkingTree %q, a.txt %q; want the file there", res.WorkingTree, readFile(t, repo, "a.txt"))
	}
	if got := branchTip(t, repo, "main"); got != res.Head {
		t.Errorf("main = %s; want %s", got, res.Head)
	}
	if st := gitT(t, repo, "status", "--porcelain"); st != "" {
		t.Errorf("main checkout status = %q; want clean", st)
	}
	if st := gitT(t, wt.Path, "status", "--porcelain"); st != "" {
		t.Errorf("worktree status after the merge = %q; want clean (index reset to the new tip)", st)
	}
	if !exists(marker) {
		t.Error("the user's post-merge hook did not run in the main checkout")
	}
	if len(res.Commits) != 1 || res.Commits[0].ID != res.WorkCommit {
		t.Errorf("Commits = %+v; want the work commit", res.Commits)
	}

	// Again: nothing left to merge.
	res, err = m.Merge(ctx, wt, MergeOptions{})
	if err != nil || res.Method != MergeUpToDate || res.Committed {
		t.Errorf("second Merge() = %+v, %v; want up to date", res, err)
	}
}

func TestMergeCommitIntoBranchNotCheckedOut(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", map[string]string{"README.md": "hello\n", "c.txt": "c\n"})
	gitT(t, repo, "config", "user.name", "Jane Doe")
	gitT(t, repo, "config", "user.email", "jane@example.com")
	gitT(t, repo, "branch", "release")
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "b.txt", "b\n")
	releaseBefore := commitOn(t, repo, "release", map[string]string{"c.txt": "c on release\n"})
	mainBefore := branchTip(t, repo, "main")

	res, err := m.Merge(ctx, wt, MergeOptions{Into: "release", Summary: "what the session did"})
	if err != nil {
		t.Fatalf("Merge() error = %v", err)
	}
	if res.Method != MergeCommit || res.WorkingTree != "" || res.Before != releaseBefore || res.Updated != "refs/heads/release" {
		t.Errorf("Merge() = %+v; want a merge commit on release, no working tree touched", res)
	}
	parents := strings.Fields(gitT(t, repo, "log", "-1", "--format=%P", "release"))
	if len(parents) != 2 || parents[0] != releaseBefore || parents[1] != res.WorkCommit {
		t.Errorf("release's parents = %v; want [%s %s]", parents, releaseBefore, res.WorkCommit)
	}
	if got := gitT(t, repo, "show", "release:b.txt") + gitT(t, repo, "show", "release:c.txt"); got != "bc on release" {
		t.Errorf("release holds %q; want both sides", got)
	}
	if got := gitT(t, repo, "log", "-1", "--format=%an <%ae>%n%B", "release"); !strings.Contains(got, "Jane Doe <jane@example.com>") ||
		!strings.Contains(got, "Merge branch 'agentpool/s' into release") || !strings.Contains(got, "what the session did") {
		t.Errorf("merge commit = %q; want the user's identity, subject and summary", got)
	}
	if branchTip(t, repo, "main") != mainBefore || exists(filepath.Join(repo, "b.txt")) {
		t.Error("the main checkout (on main) was touched")
	}
}

func TestMergeRefusals(t *testing.T) {
	tests := []struct {
		name string
		// prepare makes the merge of wt into main fail.
		prepare func(t *testing.T, repo string, wt Worktree)
		opts    MergeOptions
		wantErr error
		wantMsg string
	}{
		{"conflict", func(t *testing.T, repo string, wt Worktree) {
			writeFile(t, wt.Path, "README.md", "agent's\n")
			commitOn(t, repo, "other", map[string]string{"README.md": "theirs\n"})
		}, MergeOptions{Into: "other"}, ErrConflict, "README.md"},
		{"dirty main checkout", func(t *testing.T, repo string, wt Worktree) {
			writeFile(t, wt.Path, "a.txt", "agent's\n")
			writeFile(t, repo, "README.md", "user's edit\n")
		}, MergeOptions{}, ErrDirty, "README.md"},
		{"untracked file in the way", func(t *testing.T, repo string, wt Worktree) {
			writeFile(t, wt.Path, "a.txt", "agent's\n")
			writeFile(t, repo, "a.txt", "user's own\n")
		}, MergeOptions{}, ErrDirty, "a.txt"},
		{"base is a commit", func(t *testing.T, repo string, wt Worktree) {
			writeFile(t, wt.Path, "a.txt", "agent's\n")
		}, MergeOptions{Base: "<commit>"}, ErrUnknownRef, "not a local branch"},
		{"no such branch", func(t *testing.T, repo string, wt Worktree) {
			writeFile(t, wt.Path, "a.txt", "agent's\n")
		}, MergeOptions{Into: "nope"}, ErrUnknownRef, "nope"},
		{"rebase conflict", func(t *testing.T, repo string, wt Worktree) {
			writeFile(t, wt.Path, "README.md", "agent's\n")
			writeFile(t, wt.Path, "new.txt", "new\n")
			commitOn(t, repo, "other", map[string]string{"README.md": "theirs\n"})
		}, MergeOptions{Into: "other", Rebase: true}, ErrConflict, "README.md"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			m := newManager(t)
			repo := newRepo(t, "repo", nil)
			gitT(t, repo, "branch", "other")
			wt := create(t, m, "s", repo)
			tt.prepare(t, repo, wt)
			refs := gitT(t, repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads")
			files := workFiles(t, wt.Path)
			mainFiles := workFiles(t, repo)
			if tt.opts.Base == "<commit>" {
				tt.opts.Base = gitT(t, repo, "rev-parse", "HEAD")
			}
			_, err := m.Merge(ctx, wt, tt.opts)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Merge() error = %v; want %v naming %q", err, tt.wantErr, tt.wantMsg)
			}
			if got := gitT(t, repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"); got != refs {
				t.Errorf("branches moved:\n%s\nwant\n%s", got, refs)
			}
			if got := workFiles(t, wt.Path); !sameFiles(got, files) {
				t.Error("the worktree's files changed")
			}
			if got := workFiles(t, repo); !sameFiles(got, mainFiles) {
				t.Error("the main checkout's files changed")
			}
		})
	}
}

// workFiles is snapshotFiles without the main checkout's .git directory.
func workFiles(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	files := snapshotFiles(t, dir)
	for k := range files {
		if k == ".git" || strings.HasPrefix(k, ".git/") {
			delete(files, k)
		}
	}
	return files
}

// sameFiles compares two snapshotFiles results.
func sameFiles(a, b map[string]fileState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestMergeSquash(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	gitT(t, repo, "branch", "other")
	wt := create(t, m, "s", repo)
	for _, f := range []string{"one.txt", "two.txt"} {
		writeFile(t, wt.Path, f, f+"\n")
		gitT(t, wt.Path, "add", f)
		gitT(t, wt.Path, "commit", "-q", "-m", "agent adds "+f)
	}
	writeFile(t, wt.Path, "three.txt", "uncommitted\n")
	before := branchTip(t, repo, "other")
	res, err := m.Merge(ctx, wt, MergeOptions{Into: "other", Squash: true, Title: "Greetings", Summary: "Prompts:\n- add a greeting"})
	if err != nil {
		t.Fatalf("Merge(squash) error = %v", err)
	}
	if res.Method != MergeSquash || len(res.Commits) != 3 || !res.Committed {
		t.Errorf("Merge(squash) = %+v; want a squash of 3 commits", res)
	}
	if got := gitT(t, repo, "log", "-1", "--format=%P", "other"); got != before {
		t.Errorf("squash commit's parents = %q; want only %s", got, before)
	}
	if got := gitT(t, repo, "log", "-1", "--format=%B", "other"); !strings.HasPrefix(got, "Greetings\n\nPrompts:\n- add a greeting") || !strings.Contains(got, "Session: s") {
		t.Errorf("squash message = %q", got)
	}
	if a, b := gitT(t, repo, "rev-parse", "other^{tree}"), gitT(t, repo, "rev-parse", res.WorkCommit+"^{tree}"); a != b {
		t.Errorf("squash tree %s; want the session's %s", a, b)
	}
}

func TestMergeRebase(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	gitT(t, repo, "commit", "-q", "--allow-empty", "-m", "nothing")
	writeFile(t, repo, "c.txt", "from main\n")
	gitT(t, repo, "add", "c.txt")
	gitT(t, repo, "commit", "-q", "-m", "main moves on")
	mainTip := branchTip(t, repo, "main")

	// No work of its own: the session's branch fast-forwards.
	res, err := m.Merge(ctx, wt, MergeOptions{Rebase: true})
	if err != nil {
		t.Fatalf("Merge(rebase) error = %v", err)
	}
	if res.Method != MergeFastForward || res.Head != mainTip || len(res.Commits) != 2 || res.WorkingTree != wt.Path {
		t.Errorf("Merge(rebase) = %+v; want a fast-forward to main with 2 commits", res)
	}
	if readFile(t, wt.Path, "c.txt") != "from main\n" || gitT(t, wt.Path, "status", "--porcelain") != "" {
		t.Errorf("worktree after the rebase: c.txt %q, status %q", readFile(t, wt.Path, "c.txt"), gitT(t, wt.Path, "status", "--porcelain"))
	}

	// With work of its own: main is merged into the session's branch.
	writeFile(t, wt.Path, "a.txt", "agent's\n")
	writeFile(t, wt.Path, "ignored.log", "build output\n")
	writeFile(t, wt.Path, ".gitignore", "*.log\n")
	writeFile(t, repo, "d.txt", "more from main\n")
	gitT(t, repo, "add", "d.txt")
	gitT(t, repo, "commit", "-q", "-m", "main moves on again")
	res, err = m.Merge(ctx, wt, MergeOptions{Rebase: true})
	if err != nil {
		t.Fatalf("second Merge(rebase) error = %v", err)
	}
	if res.Method != MergeCommit || !res.Committed || res.Into != "main" || len(res.Commits) != 1 {
		t.Errorf("second Merge(rebase) = %+v; want the work committed and main merged in", res)
	}
	if got := branchTip(t, repo, "agentpool/s"); got != res.Head {
		t.Errorf("session branch = %s; want %s", got, res.Head)
	}
	for name, want := range map[string]string{"a.txt": "agent's\n", "d.txt": "more from main\n", "ignored.log": "build output\n"} {
		if got := readFile(t, wt.Path, name); got != want {
			t.Errorf("worktree %s = %q; want %q", name, got, want)
		}
	}
	if st := gitT(t, wt.Path, "status", "--porcelain"); st != "" {
		t.Errorf("worktree status = %q; want clean", st)
	}
	if branchTip(t, repo, "main") == res.Head {
		t.Error("the rebase moved main")
	}
}

func TestMergeAfterRemove(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	gitT(t, repo, "branch", "other")
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "a.txt", "kept\n")
	if _, err := m.Remove(ctx, wt, false); err != nil {
		t.Fatal(err)
	}
	res, err := m.Merge(ctx, wt, MergeOptions{Into: "other"})
	if err != nil || res.Method != MergeFastForward || res.Committed {
		t.Fatalf("Merge() of a removed worktree = %+v, %v; want its branch fast-forwarded into other", res, err)
	}
	if got := gitT(t, repo, "show", "other:a.txt"); got != "kept" {
		t.Errorf("other:a.txt = %q", got)
	}
	if _, err := m.Merge(ctx, wt, MergeOptions{Into: "other", Rebase: true}); !errors.Is(err, ErrMissing) {
		t.Errorf("Merge(rebase) of a removed worktree error = %v; want ErrMissing", err)
	}
}

func TestMergeIntoBranchOfAnotherSession(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	a := create(t, m, "a", repo)
	create(t, m, "b", repo)
	writeFile(t, a.Path, "a.txt", "a\n")
	if _, err := m.Merge(ctx, a, MergeOptions{Into: "agentpool/b"}); !errors.Is(err, ErrBranchInUse) {
		t.Errorf("Merge() into a live session's branch error = %v; want ErrBranchInUse", err)
	}
}
