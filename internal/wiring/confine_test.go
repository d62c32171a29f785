package wiring

import (
	"errors"
	"io/fs"
	"os"
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

// TestPolicyMakesStateDirs: a launch makes the missing state directories
// its provider names (MakeDirs) that its sandbox lets it write, so that an
// agent's first start under the sandbox finds them; not one its write
// list no longer names, not one the sandbox refuses (a secret), and not
// over a dangling symlink.
func TestPolicyMakesStateDirs(t *testing.T) {
	home := t.TempDir()
	wtPath := filepath.Join(t.TempDir(), "wt")
	state := filepath.Join(home, ".local", "share", "tool")
	dropped := filepath.Join(home, ".dropped")
	secret := filepath.Join(home, ".ssh", "tool")
	link := filepath.Join(home, ".linked")
	if err := os.Symlink(filepath.Join(home, "nowhere"), link); err != nil {
		t.Fatal(err)
	}
	c := Confiner{Home: home}
	req := pool.LaunchRequest{
		Spec: backends.Spec{Path: "/bin/true", Dir: wtPath, Sandbox: backends.SandboxSpec{Enabled: true,
			Write: []string{state, secret, link}, MakeDirs: []string{state, dropped, secret, link}}},
		Worktree: pool.Worktree{Session: "s1", Path: wtPath},
	}
	if _, err := c.policy(req); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(state); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("state directory %s after a launch: %v, %v; want a directory of mode 0700", state, fi, err)
	}
	for _, p := range []string{dropped, secret, filepath.Join(home, "nowhere")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after a launch: %v; want it not made", p, err)
		}
	}
}
