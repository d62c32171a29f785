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

func TestGitError(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	_, err := m.git(context.Background(), at(repo), "rev-parse", "--verify", "no-such-ref")
	var ge *GitError
	if !errors.As(err, &ge) {
		t.Fatalf("git rev-parse of a bad ref error = %v; want a *GitError", err)
	}
	if ge.ExitCode != 128 || ge.Stderr != "fatal: Needed a single revision" || ge.Dir != repo ||
		!cmp.Equal(ge.Args, []string{"rev-parse", "--verify", "no-such-ref"}) {
		t.Errorf("GitError = %+v; want exit 128, trimmed stderr, the args without global options", ge)
	}
	if want := "git rev-parse --verify no-such-ref: exit status 128: fatal: Needed a single revision"; ge.Error() != want {
		t.Errorf("GitError.Error() = %q; want %q", ge.Error(), want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = m.git(ctx, at(repo), "status")
	if !errors.Is(err, context.Canceled) || !errors.As(err, &ge) || ge.ExitCode != -1 {
		t.Errorf("git with a cancelled context error = %v; want a *GitError wrapping context.Canceled", err)
	}
}

func TestTrimStderr(t *testing.T) {
	long := strings.Repeat("noise line\n", 1000) + "fatal: the reason\n"
	got := trimStderr([]byte(long))
	if len(got) > maxStderr+3 || !strings.HasSuffix(got, "fatal: the reason") || !strings.HasPrefix(got, "...noise") {
		t.Errorf("trimStderr(long) = %d bytes ending %q; want the bounded tail", len(got), got[len(got)-20:])
	}
	if got := trimStderr([]byte("  short\n")); got != "short" {
		t.Errorf("trimStderr(short) = %q; want %q", got, "short")
	}
}

func TestDaemonEnvironmentDoesNotLeak(t *testing.T) {
	repo := newRepo(t, "repo", nil)
	decoy := newRepo(t, "decoy", nil)
	// A daemon started from inside a git hook inherits GIT_DIR and friends.
	t.Setenv("GIT_DIR", filepath.Join(decoy, ".git"))
	t.Setenv("GIT_WORK_TREE", decoy)
	t.Setenv("GIT_INDEX_FILE", filepath.Join(decoy, ".git", "index"))
	t.Setenv("GIT_AUTHOR_NAME", "Leaked")
	m := newManager(t)
	wt := create(t, m, "s", repo)
	if wt.Repo != repo {
		t.Errorf("Create() under GIT_DIR=%s used repo %s; want %s", decoy, wt.Repo, repo)
	}
	writeFile(t, wt.Path, "x.txt", "x\n")
	if _, err := m.Remove(context.Background(), wt, false); err != nil {
		t.Fatalf("Remove() error = %v", err)
	}
	os.Unsetenv("GIT_DIR")
	os.Unsetenv("GIT_WORK_TREE")
	os.Unsetenv("GIT_INDEX_FILE")
	if got := gitT(t, repo, "log", "-1", "--format=%an", "agentpool/s"); got != DefaultAuthor {
		t.Errorf("preserving commit author = %q; want %q", got, DefaultAuthor)
	}
	if got := gitT(t, decoy, "for-each-ref", "--format=%(refname)"); got != "refs/heads/main" {
		t.Errorf("decoy repository refs = %q; want it untouched", got)
	}
}

func TestNewManagerErrors(t *testing.T) {
	full := t.TempDir()
	writeFile(t, full, ".hooks/pre-commit", "#!/bin/sh\n")
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no root", Config{}, "Root is required"},
		{"no git", Config{Root: t.TempDir(), Git: "no-such-git-binary"}, "find git"},
		{"hooks dir not empty", Config{Root: full}, "not empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewManager(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewManager(%+v) error = %v; want one containing %q", tt.cfg, err, tt.want)
			}
		})
	}
}

func TestParseWorktreeList(t *testing.T) {
	out := "worktree /r\x00HEAD aaa\x00branch refs/heads/main\x00\x00" +
		"worktree /w/with space\nand newline\x00HEAD bbb\x00detached\x00locked reason\x00\x00" +
		"worktree /w/gone\x00HEAD ccc\x00branch refs/heads/agentpool/g\x00prunable gitdir file points to non-existent location\x00\x00"
	want := []gitWorktree{
		{Path: "/r", Head: "aaa", Branch: "refs/heads/main"},
		{Path: "/w/with space\nand newline", Head: "bbb", Detached: true, Locked: true},
		{Path: "/w/gone", Head: "ccc", Branch: "refs/heads/agentpool/g", Prunable: true},
	}
	if diff := cmp.Diff(want, parseWorktreeList([]byte(out))); diff != "" {
		t.Errorf("parseWorktreeList() (-want +got):\n%s", diff)
	}
}

func TestParseRawNumstat(t *testing.T) {
	z := "0000000000000000000000000000000000000000"
	out := ":100644 100644 " + z + " " + z + " M\x00:odd name.txt\x00" +
		":100644 100644 " + z + " " + z + " R090\x00old.txt\x00new.txt\x00" +
		":000000 100755 " + z + " " + z + " A\x00bin\x00" +
		"3\t1\t:odd name.txt\x00" +
		"2\t0\t\x00old.txt\x00new.txt\x00" +
		"-\t-\tbin\x00"
	want := []FileChange{
		{Path: ":odd name.txt", Status: StatusModified, OldMode: "100644", NewMode: "100644", Additions: 3, Deletions: 1},
		{Path: "new.txt", OldPath: "old.txt", Status: StatusRenamed, OldMode: "100644", NewMode: "100644", Similarity: 90, Additions: 2},
		{Path: "bin", Status: StatusAdded, NewMode: "100755", Binary: true},
	}
	got, err := parseRawNumstat([]byte(out))
	if err != nil {
		t.Fatalf("parseRawNumstat() error = %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseRawNumstat() (-want +got):\n%s", diff)
	}
	if _, err := parseRawNumstat([]byte("1\t2\tfile\x00")); err == nil {
		t.Errorf("parseRawNumstat(numstat without raw) error = nil; want an error")
	}
}
