package wiring

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// TestPolicyProtectsSharedRepository: a session made from a shared
// repository on this host's disk (by path or file:// URL) protects it as
// a main checkout: a sandbox grant that would expose it is refused, so the
// agent cannot write the remote behind the daemon's leased pushes.
func TestPolicyProtectsSharedRepository(t *testing.T) {
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared.git")
	wtPath := filepath.Join(t.TempDir(), "wt")
	for _, repo := range []string{shared, "file://" + shared} {
		c := Confiner{}
		req := pool.LaunchRequest{
			Spec:     backends.Spec{Path: "/bin/true", Dir: wtPath, Sandbox: backends.SandboxSpec{Enabled: true, Write: []string{dir}}},
			Worktree: pool.Worktree{Session: "s1", Repo: repo, Path: wtPath},
		}
		r, err := c.policy(req)
		if err != nil || r == nil {
			t.Fatalf("policy(repo %q) = %v, %v", repo, r, err)
		}
		if slices.Contains(r.Policy.Write, dir) {
			t.Errorf("policy(repo %q).Write = %v; want %s refused (it holds the shared repository)", repo, r.Policy.Write, dir)
		}
	}
}
