package worktree

import (
	"context"
	"strings"
	"testing"
)

// An agent that makes a repository inside its worktree (git init, cargo
// new) with no commit yet does not break the session's checkpoints: the
// nested repositories are left out (as a nested repository's files always
// are), everything else is recorded, and diff and close work.
func TestCheckpointWithNestedRepositoryWithoutCommit(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "app/main.go", "package main\n")
	writeFile(t, wt.Path, "new crate/src/lib.rs", "// lib\n")
	writeFile(t, wt.Path, "other/x.txt", "x\n")
	gitT(t, wt.Path+"/new crate", "init", "-q")
	gitT(t, wt.Path+"/other", "init", "-q")
	before, err := m.Checkpoint(ctx, wt)
	if err != nil {
		t.Fatalf("Checkpoint() with two nested repositories without a commit: %v", err)
	}
	files := gitT(t, repo, "ls-tree", "-r", "--name-only", before)
	if !strings.Contains(files, "app/main.go") || strings.Contains(files, "new crate") || strings.Contains(files, "other/") {
		t.Errorf("checkpoint holds:\n%s\nwant app/main.go, and neither nested repository", files)
	}
	writeFile(t, wt.Path, "app/main.go", "package main\n\nfunc main() {}\n")
	after, err := m.Checkpoint(ctx, wt)
	if err != nil || after == before {
		t.Fatalf("second Checkpoint() = %s, %v; want a new tree", after, err)
	}
	d, err := m.Diff(ctx, wt, before, after)
	if err != nil || d.Stat.Files != 1 {
		t.Errorf("Diff = %+v, %v; want app/main.go alone", d.Stat, err)
	}
}
