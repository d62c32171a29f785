package worktree

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// freshFiles is a repository with what a snapshot must get right: nested
// directories, an executable, a symlink, a .gitignore with a tracked file
// it ignores, and an empty file.
var freshFiles = map[string]string{
	"README.md":        "hello\n",
	"src/a/b/c.go":     "package c\n",
	"bin/run.sh":       "#!/bin/sh\necho run\n",
	".gitignore":       "*.log\n",
	"empty.txt":        "",
	"docs/guide/x.txt": "x\n",
}

// freshRepo makes the repository of freshFiles, with a tracked ignored
// file and a symlink committed.
func freshRepo(t *testing.T) string {
	t.Helper()
	repo := newRepo(t, "repo", freshFiles)
	if err := os.Chmod(filepath.Join(repo, "bin", "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("README.md", filepath.Join(repo, "link")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, repo, "kept.log", "tracked though ignored\n")
	gitT(t, repo, "add", "-f", "bin/run.sh", "link", "kept.log")
	gitT(t, repo, "commit", "-q", "-m", "more")
	return repo
}

// A fresh worktree's first checkpoint is its base tree, given without
// running git, and is what git's own scan says; the chain begins with it
// once the worktree changes.
func TestFreshWorktreeCheckpointRunsNoGit(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := freshRepo(t)
	wt := create(t, m, "s", repo)
	base := gitT(t, repo, "rev-parse", wt.BaseCommit+"^{tree}")
	first, ran := checkpointT(t, m, wt)
	if ran || first != base {
		t.Fatalf("first Checkpoint of a fresh worktree = %s (ran git: %v); want its base tree %s without git", first, ran, base)
	}
	if got := truth(t, m, wt); got != first {
		t.Fatalf("git's snapshot of the fresh worktree = %s; the Checkpoint said %s", got, first)
	}
	if again, ran := checkpointT(t, m, wt); ran || again != first {
		t.Fatalf("second Checkpoint = %s (ran git: %v); want %s without git", again, ran, first)
	}
	writeFile(t, wt.Path, "src/a/b/c.go", "package c // changed\n")
	second, ran := checkpointT(t, m, wt)
	if !ran || second == first || second != truth(t, m, wt) {
		t.Fatalf("Checkpoint after a change = %s (ran git: %v); want a scan that agrees with git", second, ran)
	}
	ref := CheckpointRefPrefix + "s"
	if got := gitT(t, repo, "log", "--format=%T", ref); got != second+"\n"+first {
		t.Fatalf("checkpoint chain trees = %q; want %s then the state at creation %s", got, second, first)
	}
	if _, err := m.Checkpoint(ctx, wt); err != nil {
		t.Fatal(err)
	}
	if n := gitT(t, repo, "rev-list", "--count", ref); n != "2" {
		t.Errorf("checkpoint chain holds %s commits; want 2", n)
	}
}

// A change made before the first checkpoint (by an agent that started
// at once) is seen: the checkpoint scans, and the state at creation,
// which nobody was given, is not in the chain.
func TestFreshWorktreeChangedBeforeFirstCheckpoint(t *testing.T) {
	for name, change := range map[string]func(t *testing.T, wt Worktree){
		"new file":     func(t *testing.T, wt Worktree) { writeFile(t, wt.Path, "docs/guide/new.txt", "new\n") },
		"ignored file": func(t *testing.T, wt Worktree) { writeFile(t, wt.Path, "build/out.log", "log\n") },
		"deleted":      func(t *testing.T, wt Worktree) { mustRemove(t, filepath.Join(wt.Path, "empty.txt")) },
		"staged in the index": func(t *testing.T, wt Worktree) {
			// No file of the worktree changes: only its index.
			gitT(t, wt.Path, "update-index", "--chmod=-x", "bin/run.sh")
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := newManager(t)
			repo := freshRepo(t)
			wt := create(t, m, "s", repo)
			change(t, wt)
			got, ran := checkpointT(t, m, wt)
			if want := truth(t, m, wt); !ran || got != want {
				t.Fatalf("first Checkpoint after %s = %s (ran git: %v); want git's %s from a scan", name, got, ran, want)
			}
			if n := gitT(t, repo, "rev-list", "--count", CheckpointRefPrefix+"s"); n != "1" {
				t.Errorf("checkpoint chain holds %s commits; want the one state given", n)
			}
		})
	}
}

// Where a checkout may read back differently from its commit, the first
// checkpoint scans as before.
func TestFreshWorktreeConvertingRepositoryScans(t *testing.T) {
	for name, prepare := range map[string]func(t *testing.T, repo string){
		".gitattributes deep down": func(t *testing.T, repo string) {
			writeFile(t, repo, "src/a/.gitattributes", "*.go text eol=crlf\n")
			gitT(t, repo, "add", "-A")
			gitT(t, repo, "commit", "-q", "-m", "attrs")
		},
		"core.autocrlf": func(t *testing.T, repo string) { gitT(t, repo, "config", "core.autocrlf", "true") },
		"a filter named by an attribute": func(t *testing.T, repo string) {
			gitT(t, repo, "config", "filter.x.clean", "tr a-z A-Z")
			writeFile(t, filepath.Join(repo, ".git"), "info/attributes", "*.md filter=x\n")
		},
		"an include": func(t *testing.T, repo string) { gitT(t, repo, "config", "include.path", "/nowhere") },
		"info/attributes": func(t *testing.T, repo string) {
			writeFile(t, filepath.Join(repo, ".git"), "info/attributes", "* -text\n")
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := newManager(t)
			repo := freshRepo(t)
			prepare(t, repo)
			wt := create(t, m, "s", repo)
			got, ran := checkpointT(t, m, wt)
			if want := truth(t, m, wt); !ran || got != want {
				t.Fatalf("first Checkpoint with %s = %s (ran git: %v); want git's %s from a scan", name, got, ran, want)
			}
		})
	}
}

// A filter defined but named by no attribute (as git lfs install leaves
// one in the user's config) changes nothing: the checkpoint is the base
// tree, without git, and git's scan agrees.
func TestFreshWorktreeFilterDefinedAloneSeeds(t *testing.T) {
	m := newManager(t)
	repo := freshRepo(t)
	gitT(t, repo, "config", "filter.lfs.clean", "git-lfs clean -- %f")
	gitT(t, repo, "config", "filter.lfs.smudge", "git-lfs smudge -- %f")
	gitT(t, repo, "config", "filter.lfs.required", "true")
	wt := create(t, m, "s", repo)
	got, ran := checkpointT(t, m, wt)
	if want := truth(t, m, wt); ran || got != want {
		t.Fatalf("first Checkpoint with an unused filter = %s (ran git: %v); want git's %s without git", got, ran, want)
	}
}

// The state at creation that a checkpoint gave outlives the worktree:
// Remove anchors it.
func TestFreshWorktreeRemoveAnchorsGivenState(t *testing.T) {
	m := newManager(t)
	repo := freshRepo(t)
	wt := create(t, m, "s", repo)
	first, ran := checkpointT(t, m, wt)
	if ran {
		t.Fatal("first Checkpoint of a fresh worktree ran git")
	}
	if _, err := m.Remove(context.Background(), wt, false); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(gitT(t, repo, "rev-parse", CheckpointRefPrefix+"s^{tree}")); got != first {
		t.Errorf("checkpoint chain after Remove = %q; want the state given, %s", got, first)
	}
}
