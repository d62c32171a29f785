package worktree

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// newShared makes a shared bare repository (the remote of a cluster) with
// files committed on main, and returns its path.
func newShared(t testing.TB, files map[string]string) string {
	t.Helper()
	src := newRepo(t, "src", files)
	bare := filepath.Join(t.TempDir(), "shared.git")
	gitT(t, src, "init", "-q", "--bare", "-b", "main", bare)
	gitT(t, src, "push", "-q", bare, "main")
	return bare
}

// newHost returns a Manager with its own worktree root and mirror root,
// as one host of a cluster has.
func newHost(t testing.TB) *Manager {
	t.Helper()
	home := t.TempDir()
	m, err := NewManager(Config{
		Root:       filepath.Join(home, "worktrees"),
		MirrorRoot: filepath.Join(home, "mirrors"),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		TrustFile:  filepath.Join(home, "trusted.json"),
	})
	if err != nil {
		t.Fatalf("NewManager() error = %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// refOf returns what ref holds in the repository at dir, "" for nothing.
func refOf(t testing.TB, dir, ref string) string {
	t.Helper()
	out, err := gitRaw(dir, nil, "rev-parse", "-q", "--verify", ref)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func TestCreateFromURL(t *testing.T) {
	shared := newShared(t, map[string]string{"README.md": "shared\n"})
	for _, repo := range []string{"file://" + shared, shared} {
		t.Run(repo, func(t *testing.T) {
			m := newHost(t)
			wt, err := m.Create(context.Background(), "s1", repo, "")
			if err != nil {
				t.Fatalf("Create(%q) error = %v", repo, err)
			}
			if wt.Repo != repo {
				t.Errorf("Create(%q).Repo = %q; want the URL", repo, wt.Repo)
			}
			if got := readFile(t, wt.Path, "README.md"); got != "shared\n" {
				t.Errorf("README.md in the worktree = %q; want the shared repository's", got)
			}
			if wt.BaseCommit != refOf(t, shared, "refs/heads/main") {
				t.Errorf("BaseCommit = %s; want the remote's main %s", wt.BaseCommit, refOf(t, shared, "refs/heads/main"))
			}
			p, err := m.GitPaths(context.Background(), wt)
			if err != nil {
				t.Fatalf("GitPaths() error = %v", err)
			}
			if !within(m.mirrors, p.CommonDir) {
				t.Errorf("GitPaths().CommonDir = %s; want the mirror under %s", p.CommonDir, m.mirrors)
			}
			// The mirror names no remote: nothing in its config to run or leak.
			if cfg := readFile(t, p.CommonDir, "config"); strings.Contains(cfg, "remote") || strings.Contains(cfg, shared) {
				t.Errorf("mirror config = %q; want no remote in it", cfg)
			}
			// The branch's log directory exists, as in a checkout's .git: a
			// sandbox grants the agent's git only what exists.
			if !exists(p.LogDir()) || !exists(p.RefDir()) {
				t.Errorf("mirror has no %s or %s: the agent's git could not update its branch", p.LogDir(), p.RefDir())
			}
			if exists(filepath.Join(p.CommonDir, "hooks")) {
				t.Errorf("mirror has a hooks directory (from a template)")
			}
			// The session's branch is the mirror's, not the remote's, until pushed.
			if got := refOf(t, shared, "refs/heads/"+wt.Branch); got != "" {
				t.Errorf("remote has %s = %s before any push", wt.Branch, got)
			}
			// Checkpoints, diff and remove work as from a checkout.
			writeFile(t, wt.Path, "new.txt", "work\n")
			cp, err := m.Checkpoint(context.Background(), wt)
			if err != nil {
				t.Fatalf("Checkpoint() error = %v", err)
			}
			d, err := m.Diff(context.Background(), wt, "", cp)
			if err != nil || len(d.Files) != 1 || d.Files[0].Path != "new.txt" {
				t.Fatalf("Diff() = %+v, %v; want new.txt", d.Files, err)
			}
			if _, err := m.Remove(context.Background(), wt, false); err != nil {
				t.Fatalf("Remove() error = %v", err)
			}
		})
	}
}

func TestCreateFromURLRefused(t *testing.T) {
	m := newHost(t)
	for _, repo := range []string{
		"ext::sh -c touch% /tmp/pwned",
		"ext::sh",
		"fd::3",
		"--upload-pack=touch /tmp/pwned",
		"-oProxyCommand=x:y",
		"https://user:secret@example.com/r.git",
		"https://token@example.com/r.git",
		"ssh://user:secret@example.com/r.git",
		"ssh://-oProxyCommand=x/r.git",
		"ssh://-oProxyCommand=x@host/r.git",
		"ssh://%2DoProxyCommand=x/r.git",
		"git://example.com/r.git",
		"http://example.com/r.git",
		"file://example.com/srv/r.git",
		"file:///srv/../etc/r.git",
		"-host:r.git",
		"host:--upload-pack=x",
		"https://example.com/r.git#frag",
	} {
		_, err := m.Create(context.Background(), "s1", repo, "")
		if !errors.Is(err, ErrInvalidURL) {
			t.Errorf("Create(%q) error = %v; want ErrInvalidURL", repo, err)
		}
		if strings.Contains(errString(err), "secret") {
			t.Errorf("Create(%q) error = %v; shows the credentials", repo, err)
		}
	}
	for _, repo := range []string{"ssh://git@example.com/r.git", "git@example.com:org/r.git", "https://example.com/r.git", "file:///srv/r.git"} {
		if _, err := parseRemote(repo); err != nil {
			t.Errorf("parseRemote(%q) error = %v; want accepted", repo, err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestBareRefusedWithoutMirrors: a Manager without a mirror root refuses a
// bare repository as before.
func TestBareRefusedWithoutMirrors(t *testing.T) {
	shared := newShared(t, nil)
	m := newManager(t)
	for _, repo := range []string{shared, "file://" + shared} {
		if _, err := m.Create(context.Background(), "s1", repo, ""); !errors.Is(err, ErrBareRepository) {
			t.Errorf("Create(%q) error = %v; want ErrBareRepository", repo, err)
		}
	}
}

func TestSetupFromURL(t *testing.T) {
	ctx := context.Background()
	setup := `{"copy": [".env"], "setup": {"command": ["sh", "-c", "echo ran > setup-ran.txt"]}}`
	shared := newShared(t, map[string]string{"README.md": "x\n", SetupFileName: setup})
	m := newHost(t)
	url := "file://" + shared
	sf, err := m.SetupFileOf(ctx, url)
	if err != nil {
		t.Fatalf("SetupFileOf(%q) error = %v", url, err)
	}
	if sf.Repo != url || sf.Trusted || string(sf.Content) != setup {
		t.Fatalf("SetupFileOf() = %+v; want the committed file of %s, untrusted", sf, url)
	}
	// Untrusted: nothing runs.
	wt, err := m.Create(ctx, "s0", url, "")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := m.RunSetup(ctx, wt, func(SetupEvent) {})
	if err != nil || ev.Kind != SetupUntrusted || !strings.Contains(ev.TrustCommand, url) {
		t.Fatalf("RunSetup() untrusted = %+v, %v; want SetupUntrusted naming %s", ev, err, url)
	}
	if _, _, err := m.Trust(ctx, url, sf.SHA256); err != nil {
		t.Fatalf("Trust() error = %v", err)
	}
	if err := m.PrepareSetup(ctx, wt); err != nil {
		t.Fatalf("PrepareSetup() after Trust error = %v", err)
	}
	var evs []SetupEvent
	end, err := m.RunSetup(ctx, wt, func(e SetupEvent) { evs = append(evs, e) })
	if err != nil {
		t.Fatalf("RunSetup() error = %v", err)
	}
	if len(evs) == 0 || evs[0].Kind != SetupCopied || !strings.Contains(evs[0].Error, "no main checkout to copy from") ||
		len(evs[0].Skipped) != 1 || evs[0].Skipped[0].Path != ".env" {
		t.Errorf("first setup event = %+v; want the copy refused with its reason", evs)
	}
	if !end.OK || readFile(t, wt.Path, "setup-ran.txt") != "ran\n" {
		t.Errorf("setup end = %+v, setup-ran.txt = %q; want the command run", end, readFile(t, wt.Path, "setup-ran.txt"))
	}
}

// TestFetchDespiteAgentCheckout: an agent that checks the base branch out
// in its worktree does not stop the mirror's fetches (and with them every
// later session of the repository).
func TestFetchDespiteAgentCheckout(t *testing.T) {
	ctx := context.Background()
	shared := newShared(t, map[string]string{"README.md": "v1\n"})
	m := newHost(t)
	wt, err := m.Create(ctx, "s1", shared, "")
	if err != nil {
		t.Fatal(err)
	}
	gitT(t, wt.Path, "checkout", "-q", "main")
	other := filepath.Join(t.TempDir(), "other")
	gitT(t, t.TempDir(), "clone", "-q", shared, other)
	writeFile(t, other, "README.md", "v2\n")
	gitT(t, other, "commit", "-q", "-am", "v2")
	gitT(t, other, "push", "-q", "origin", "main")
	wt2, err := m.Create(ctx, "s2", shared, "")
	if err != nil {
		t.Fatalf("Create() after an agent checked main out: %v", err)
	}
	if got := readFile(t, wt2.Path, "README.md"); got != "v2\n" {
		t.Errorf("README.md = %q; want the remote's new main", got)
	}
}
