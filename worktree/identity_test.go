package worktree

import (
	"context"
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
