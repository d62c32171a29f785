package wiring

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/worktree"
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

// TestGitPathsOfView: a launch's git paths carry the worktree's private
// git view, part for part, and none when the worktree has no view.
func TestGitPathsOfView(t *testing.T) {
	for k, v := range map[string]string{"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.com"} {
		t.Setenv(k, v)
	}
	ctx := context.Background()
	repo := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"commit", "-q", "--allow-empty", "-m", "init"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	m, err := worktree.NewManager(worktree.Config{Root: filepath.Join(t.TempDir(), "worktrees"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	wt, err := m.Create(ctx, "s", repo, "")
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.GitPaths(ctx, wt)
	if err != nil || !want.View.Set() {
		t.Fatalf("GitPaths() = %+v, %v; want a view", want, err)
	}
	got, err := GitPathsOf(m)(ctx, fromWT(wt))
	if err != nil {
		t.Fatal(err)
	}
	v := want.View
	if got.CommonDir != want.CommonDir || got.AdminDir != want.AdminDir || got.Branch != want.Branch ||
		got.View != (sandbox.GitView{ObjectsUpper: v.ObjectsUpper, ObjectsWork: v.ObjectsWork, Refs: v.Refs, Logs: v.Logs}) {
		t.Errorf("GitPathsOf() = %+v; want the paths of %+v", got, want)
	}
	want.View = worktree.GitView{}
	if got := sandboxGitPaths(want); got.View.Set() {
		t.Errorf("sandboxGitPaths() of a worktree without a view = %+v; want no view", got.View)
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

// TestGrantOfADaemonSecretRefused: a grant that would expose a secret the
// daemon was given by path (its cluster key, say) is refused and named.
func TestGrantOfADaemonSecretRefused(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "keys", "cluster.key")
	if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.Open(sandbox.Config{Name: "agentpool-test-secret", CgroupParent: "none", NoLandlock: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	c := Confiner{Sandbox: sb, Secrets: []string{key}}
	spec := backends.Spec{Provider: "tool", Path: "/bin/sh", Sandbox: backends.SandboxSpec{Enabled: true, Read: []string{filepath.Join(dir, "keys")}}}
	notes := c.ConfigNotes(spec)
	if len(notes) != 1 || !strings.Contains(notes[0].Reason, "contains a secret of the daemon's "+key) {
		t.Errorf("ConfigNotes() = %+v; want the directory holding the cluster key refused", notes)
	}
}

// TestMakeStateDirs: a missing sandbox.write directory is made (0700,
// with its parents) under the home or a directory the daemon's user owns;
// under a system directory it is not, and the error names the entry.
func TestMakeStateDirs(t *testing.T) {
	home := t.TempDir()
	own := t.TempDir()
	tests := []struct {
		name    string
		dir     string
		wantErr string
	}{
		{"home", filepath.Join(home, ".augment"), ""},
		{"home, parents", filepath.Join(home, ".local", "share", "tool"), ""},
		{"owned", filepath.Join(own, "cache", "tool"), ""},
		{"system", "/usr/share/agentpool-test-never-made", `sandbox.write "/usr/share/agentpool-test-never-made" does not exist`},
		{"top", "/agentpool-test-never-made", "/ is a system directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := backends.SandboxSpec{Write: []string{tt.dir}, MakeDirs: []string{tt.dir}}
			err := makeStateDirs(sb, sandbox.Policy{Write: []string{tt.dir}}, home)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("makeStateDirs(%s) error = %v; want %q", tt.dir, err, tt.wantErr)
				}
				if _, err := os.Lstat(tt.dir); err == nil {
					t.Fatalf("makeStateDirs(%s) made it", tt.dir)
				}
				return
			}
			if err != nil {
				t.Fatalf("makeStateDirs(%s) error = %v; want nil", tt.dir, err)
			}
			if st, err := os.Stat(tt.dir); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
				t.Fatalf("after makeStateDirs(%s): %v, %v; want a directory of mode 0700", tt.dir, st, err)
			}
		})
	}
}
