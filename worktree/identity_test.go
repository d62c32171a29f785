package worktree

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestIdentity(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	ctx := context.Background()
	if got, want := m.Identity(ctx, repo), (Identity{Name: DefaultAuthor, Email: DefaultAuthorEmail, Default: true}); got != want {
		t.Errorf("Identity of a repository without user = %+v; want %+v", got, want)
	}
	gitT(t, repo, "config", "user.name", "Jane Doe")
	if got := m.Identity(ctx, repo); !got.Default {
		t.Errorf("Identity with only user.name = %+v; want the default", got)
	}
	gitT(t, repo, "config", "user.email", "jane@example.com")
	if got, want := m.Identity(ctx, repo), (Identity{Name: "Jane Doe", Email: "jane@example.com"}); got != want {
		t.Errorf("Identity = %+v; want %+v", got, want)
	}
}

// The identity is read once per repository while its configuration files
// stay as they were: a change of the repository's or the user's file, or
// a file that includes another, reads it again.
func TestIdentityKeptWhileConfigUnchanged(t *testing.T) {
	global := filepath.Join(t.TempDir(), "gitconfig")
	if err := os.WriteFile(global, []byte("[core]\n\tpager = cat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_CONFIG_GLOBAL", global)
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	ctx := context.Background()
	gitT(t, repo, "config", "user.name", "Jane Doe")
	gitT(t, repo, "config", "user.email", "jane@example.com")
	ask := func() (Identity, bool) {
		before := m.gitRuns.Load()
		id := m.Identity(ctx, repo)
		return id, m.gitRuns.Load() != before
	}
	if id, ran := ask(); !ran || id.Name != "Jane Doe" {
		t.Fatalf("first Identity = %+v (ran git: %v); want Jane Doe from git", id, ran)
	}
	if id, ran := ask(); ran || id.Name != "Jane Doe" {
		t.Fatalf("second Identity = %+v (ran git: %v); want Jane Doe kept", id, ran)
	}
	if err := os.WriteFile(global, []byte("[core]\n\tpager = less\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ran := ask(); !ran {
		t.Fatal("Identity after the user's git config changed ran no git; want it read again")
	}
	gitT(t, repo, "config", "user.name", "John Roe")
	if id, ran := ask(); !ran || id.Name != "John Roe" {
		t.Fatalf("Identity after the repository's config changed = %+v (ran git: %v); want John Roe from git", id, ran)
	}
	gitT(t, repo, "config", "include.path", filepath.Join(t.TempDir(), "more"))
	for range 2 {
		if _, ran := ask(); !ran {
			t.Fatal("Identity of a repository whose config includes another file was kept; want it read each time")
		}
	}
}
