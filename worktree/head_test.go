package worktree

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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

	// A FIFO or a symlink in a ref's place (an agent may write refs) is
	// left to git, without blocking on it.
	if err := os.WriteFile(filepath.Join(repo, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := filepath.Join(repo, ".git", "refs", "heads", "main")
	_ = os.Remove(ref)
	if err := syscall.Mkfifo(ref, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan bool, 1)
	go func() { _, ok := ReadHead(repo); done <- ok }()
	select {
	case ok := <-done:
		if ok {
			t.Error("a FIFO as the branch's ref: ReadHead answered")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadHead blocked on a FIFO in a ref's place")
	}
	_ = os.Remove(ref)
	if err := os.Symlink("/etc/hostname", ref); err != nil {
		t.Fatal(err)
	}
	if got, ok := ReadHead(repo); ok {
		t.Errorf("a symlink as the branch's ref: ReadHead = %q, want it left to git", got)
	}
}
