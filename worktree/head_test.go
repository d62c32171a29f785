package worktree

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadHeadAgreesWithGit reads HEAD from the git directory's files in
// each layout a user's repository has, and checks it against git's own
// answer; where ReadHead cannot be sure, it must say so rather than guess.
func TestReadHeadAgreesWithGit(t *testing.T) {
	repo := t.TempDir()
	gitT(t, repo, "init", "-q", "-b", "main")
	if _, ok := ReadHead(repo); ok {
		t.Fatal("an unborn branch: ReadHead answered instead of leaving it to git")
	}
	gitT(t, repo, "commit", "-q", "--allow-empty", "-m", "one")
	check := func(dir, what string) {
		t.Helper()
		want := gitT(t, dir, "rev-parse", "HEAD")
		got, ok := ReadHead(dir)
		if !ok || got != want {
			t.Fatalf("%s: ReadHead = %q, %t; git says %s", what, got, ok, want)
		}
	}
	check(repo, "loose branch")
	gitT(t, repo, "commit", "-q", "--allow-empty", "-m", "two")
	check(repo, "after a commit")
	gitT(t, repo, "pack-refs", "--all")
	if _, err := os.Stat(filepath.Join(repo, ".git", "refs", "heads", "main")); !os.IsNotExist(err) {
		t.Fatalf("pack-refs left the loose ref: %v", err)
	}
	check(repo, "packed branch")
	gitT(t, repo, "commit", "-q", "--allow-empty", "-m", "three")
	check(repo, "loose ref over a packed one")
	gitT(t, repo, "checkout", "-q", "-b", "feature/x")
	gitT(t, repo, "commit", "-q", "--allow-empty", "-m", "four")
	check(repo, "branch with a slash")
	gitT(t, repo, "checkout", "-q", "--detach", "HEAD~2")
	check(repo, "detached")
	linked := filepath.Join(t.TempDir(), "linked")
	gitT(t, repo, "worktree", "add", "-q", "-b", "side", linked, "main")
	check(linked, "linked worktree")
	gitT(t, repo, "checkout", "-q", "main")

	// What it must leave to git: a HEAD naming something outside
	// refs/heads or escaping the directory, and garbage.
	for _, head := range []string{"ref: refs/remotes/origin/main\n", "ref: refs/heads/../../config\n", "not a hash\n", "ref: refs/heads/gone\n"} {
		if err := os.WriteFile(filepath.Join(repo, ".git", "HEAD"), []byte(head), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, ok := ReadHead(repo); ok {
			t.Errorf("HEAD %q: ReadHead = %q, want it left to git", head, got)
		}
	}
	if _, ok := ReadHead(t.TempDir()); ok {
		t.Error("a directory without .git: ReadHead answered")
	}
}
