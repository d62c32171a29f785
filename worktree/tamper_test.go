package worktree

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The tests here play a hostile agent that may write its worktree and its
// worktree's admin directory (as its sandbox allows, to commit on its own
// branch) and wants the daemon's unconfined git to run its program.

// evilConfig is a git configuration that makes nearly every git command run
// evil: fsmonitor, hooks, pager, editor, external diff, filters, textconv,
// signing.
func evilConfig(evil, hooks string) string {
	return "[core]\n" +
		"\trepositoryformatversion = 0\n" +
		"\tbare = false\n" +
		"\tfsmonitor = " + evil + "\n" +
		"\thooksPath = " + hooks + "\n" +
		"\tpager = " + evil + "\n" +
		"\teditor = " + evil + "\n" +
		"\tsshCommand = " + evil + "\n" +
		"[diff]\n\texternal = " + evil + "\n" +
		"[diff \"evil\"]\n\ttextconv = " + evil + "\n\tcommand = " + evil + "\n" +
		"[filter \"evil\"]\n\tclean = " + evil + "\n\tsmudge = " + evil + "\n\trequired = true\n" +
		"[commit]\n\tgpgSign = true\n" +
		"[gpg]\n\tprogram = " + evil + "\n"
}

// hostile is what an agent planted, and where its programs would leave
// their mark.
type hostile struct {
	marker string // outside the worktree: must never exist
	evil   string // the program
	hooks  string // a hooks directory of planted hooks
}

// plantEvil writes the agent's program and hooks into the worktree and a
// .gitattributes that routes every file through the evil filter and diff
// drivers (harmless while no trusted config defines them).
func plantEvil(t *testing.T, wt Worktree) hostile {
	t.Helper()
	h := hostile{
		marker: filepath.Join(t.TempDir(), "pwned"),
		evil:   filepath.Join(wt.Path, "evil.sh"),
		hooks:  filepath.Join(wt.Path, "evil-hooks"),
	}
	must(t, os.WriteFile(h.evil, []byte("#!/bin/sh\necho \"evil $*\" >> '"+h.marker+"'\ncat\n"), 0o755))
	plantHooks(t, h.hooks, h.marker)
	writeFile(t, wt.Path, ".gitattributes", "* filter=evil diff=evil\n")
	return h
}

// fakeRepo makes a git directory at dir with the evil configuration.
func fakeRepo(t *testing.T, dir string, h hostile) {
	t.Helper()
	gitT(t, filepath.Dir(dir), "init", "-q", "--bare", dir)
	plantHooks(t, filepath.Join(dir, "hooks"), h.marker)
	writeFile(t, dir, "config", evilConfig(h.evil, h.hooks))
}

// control proves that the plant works: the agent's own git, or a daemon
// that trusted the worktree's files, runs the program.
func (h hostile) control(t *testing.T, wt Worktree) {
	t.Helper()
	gitRaw(wt.Path, nil, "status")
	if !exists(h.marker) {
		t.Fatalf("control: git status in the tampered worktree did not run the planted program; the test would prove nothing")
	}
	must(t, os.Remove(h.marker))
}

// check fails the test if the program ran.
func (h hostile) check(t *testing.T, when string) {
	t.Helper()
	if exists(h.marker) {
		t.Fatalf("%s: the agent's program ran: %s", when, readFile(t, filepath.Dir(h.marker), filepath.Base(h.marker)))
	}
}

// restarted is a second Manager on the same root, as after a daemon
// restart: it has cached nothing.
func restarted(t *testing.T, m *Manager) *Manager {
	t.Helper()
	m2, err := NewManager(Config{Root: m.Root(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("NewManager() error = %v", err)
	}
	t.Cleanup(func() { m2.Close() })
	return m2
}

// exercise runs every operation short of removal on wt and checks that
// each acted on the real repository.
func exercise(t *testing.T, m *Manager, wt Worktree, h hostile) {
	t.Helper()
	ctx := context.Background()
	c1, err := m.Checkpoint(ctx, wt)
	must(t, err)
	h.check(t, "Checkpoint")
	if got := gitT(t, wt.Repo, "cat-file", "-t", c1); got != "tree" {
		t.Fatalf("checkpoint %s is a %q in the real repository; want a tree", c1, got)
	}
	if got := gitT(t, wt.Repo, "rev-parse", CheckpointRefPrefix+wt.Session+"^{tree}"); got != c1 {
		t.Fatalf("checkpoint chain of the real repository ends at tree %s; want %s", got, c1)
	}
	d, err := m.Diff(ctx, wt, "", "")
	must(t, err)
	h.check(t, "Diff")
	if !strings.Contains(d.Patch, "+agent work") {
		t.Fatalf("Diff() patch lacks the agent's work:\n%s", d.Patch)
	}
	must(t, m.Restore(ctx, wt, wt.BaseCommit))
	h.check(t, "Restore(base)")
	if got := readFile(t, wt.Path, "work.txt"); got != "<missing>" {
		t.Fatalf("after Restore(base) work.txt = %q; want it gone", got)
	}
	must(t, m.Restore(ctx, wt, c1))
	h.check(t, "Restore(checkpoint)")
	if got := readFile(t, wt.Path, "work.txt"); got != "agent work\n" {
		t.Fatalf("after Restore(checkpoint) work.txt = %q; want the agent's work", got)
	}
	if _, err := m.GitPaths(ctx, wt); err != nil {
		t.Fatalf("GitPaths() error = %v", err)
	}
	h.check(t, "GitPaths")
}

// removeAndCheck removes wt without discard and checks that its work is on
// the real session branch.
func removeAndCheck(t *testing.T, m *Manager, wt Worktree, h hostile) {
	t.Helper()
	res, err := m.Remove(context.Background(), wt, false)
	if err != nil {
		t.Fatalf("Remove() error = %v", err)
	}
	h.check(t, "Remove")
	if !res.Committed || exists(wt.Path) {
		t.Fatalf("Remove() = %+v, directory left: %v; want the work committed and the directory gone", res, exists(wt.Path))
	}
	if got := gitT(t, wt.Repo, "rev-parse", "refs/heads/"+wt.Branch); got != res.Commit {
		t.Fatalf("real branch %s is at %s; want the close commit %s", wt.Branch, got, res.Commit)
	}
	if got := gitT(t, wt.Repo, "show", res.Commit+":work.txt"); got != "agent work" {
		t.Fatalf("close commit work.txt = %q; want the agent's work", got)
	}
	h.check(t, "after Remove")
}

func TestTamperedDotGitFile(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		name := map[bool]string{false: "same daemon", true: "restarted daemon"}[fresh]
		t.Run(name, func(t *testing.T) {
			m := newManager(t)
			repo := newRepo(t, "repo", nil)
			wt := create(t, m, "s", repo)
			real := gitPathsT(t, wt)
			writeFile(t, wt.Path, "work.txt", "agent work\n")
			h := plantEvil(t, wt)
			fake := filepath.Join(wt.Path, "fake")
			fakeRepo(t, fake, h)
			writeFile(t, fake, "config", evilConfig(h.evil, h.hooks)+"\tworktree = "+wt.Path+"\n")
			writeFile(t, wt.Path, ".git", "gitdir: "+fake+"\n")
			h.control(t, wt)
			if fresh {
				m = restarted(t, m)
			}

			exercise(t, m, wt, h)
			if entries, _ := filepath.Glob(filepath.Join(fake, "refs", "*", "*")); len(entries) != 0 {
				t.Fatalf("the daemon wrote refs into the fake repository: %v", entries)
			}
			// Reconcile at start repairs the .git file and reports it present.
			rep, err := restarted(t, m).Reconcile(context.Background(), []Worktree{wt}, false)
			must(t, err)
			h.check(t, "Reconcile")
			if diff := cmp.Diff([]Worktree{wt}, rep.Present); diff != "" || len(rep.Problems) != 0 {
				t.Fatalf("Reconcile() present (-want +got):\n%s\nproblems: %v", diff, rep.Problems)
			}
			if got := readFile(t, wt.Path, ".git"); got != "gitdir: "+real.AdminDir+"\n" {
				t.Fatalf("after Reconcile .git = %q; want it repaired to %s", got, real.AdminDir)
			}
			// The agent does it again; the removal commits the work anyway.
			writeFile(t, wt.Path, ".git", "gitdir: "+fake+"\n")
			// A daemon that lost its database cannot tell the repository
			// without trusting the .git file: it leaves the worktree alone.
			rep, err = restarted(t, m).Reconcile(context.Background(), nil, true)
			must(t, err)
			h.check(t, "Reconcile(prune) of an unknown worktree")
			if len(rep.Unknown) != 1 || rep.Unknown[0].Pruned || readFile(t, wt.Path, "work.txt") != "agent work\n" {
				t.Fatalf("Reconcile(nil, prune) of a tampered unknown worktree = %+v; want it reported and left alone", rep.Unknown)
			}
			removeAndCheck(t, m, wt, h)
		})
	}
}

func TestTamperedCommondir(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		name := map[bool]string{false: "same daemon", true: "restarted daemon"}[fresh]
		t.Run(name, func(t *testing.T) {
			m := newManager(t)
			repo := newRepo(t, "repo", nil)
			wt := create(t, m, "s", repo)
			real := gitPathsT(t, wt)
			writeFile(t, wt.Path, "work.txt", "agent work\n")
			h := plantEvil(t, wt)
			// The fake common dir lies where the agent may write: in its
			// worktree, or in its admin directory.
			fake := filepath.Join(real.AdminDir, "fakecommon")
			fakeRepo(t, fake, h)
			writeFile(t, real.AdminDir, "commondir", fake+"\n")
			h.control(t, wt)
			if fresh {
				m = restarted(t, m)
			}

			exercise(t, m, wt, h)
			removeAndCheck(t, m, wt, h)
		})
	}
}

func TestTamperedAdminGitdir(t *testing.T) {
	// The agent points its admin directory's gitdir file elsewhere, so
	// that git (and a daemon matching gitdir files) no longer finds the
	// worktree. The daemon that made it still knows, repairs and removes it.
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	real := gitPathsT(t, wt)
	writeFile(t, wt.Path, "work.txt", "agent work\n")
	writeFile(t, real.AdminDir, "gitdir", filepath.Join(t.TempDir(), "elsewhere", ".git")+"\n")
	if _, err := restarted(t, m).GitPaths(context.Background(), wt); err == nil {
		t.Errorf("GitPaths() of a restarted daemon trusted nothing and still found the worktree; want an error")
	}
	removeAndCheck(t, m, wt, hostile{marker: filepath.Join(t.TempDir(), "none")})
}

func TestDotGitReplacedByDirectory(t *testing.T) {
	// The agent replaces its .git file by a repository of its own: the
	// daemon moves it aside, never deletes it, and commits it with the rest.
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "work.txt", "agent work\n")
	must(t, os.Remove(filepath.Join(wt.Path, ".git")))
	gitT(t, wt.Path, "init", "-q")
	h := hostile{marker: filepath.Join(t.TempDir(), "pwned")}
	writeFile(t, wt.Path, ".git/config", evilConfig(filepath.Join(wt.Path, "evil.sh"), filepath.Join(wt.Path, "hooks")))
	res, err := m.Remove(context.Background(), wt, false)
	if err != nil {
		t.Fatalf("Remove() error = %v", err)
	}
	if got := gitT(t, repo, "show", res.Commit+":work.txt"); got != "agent work" {
		t.Errorf("close commit work.txt = %q; want the agent's work", got)
	}
	if got := gitT(t, repo, "show", res.Commit+":.git"+tamperedSuffix+"/config"); !strings.Contains(got, "fsmonitor") {
		t.Errorf("close commit lacks the agent's moved-aside .git directory: %q", got)
	}
	h.check(t, "Remove")
}

func TestPlantedHooksSkipDaemonCommits(t *testing.T) {
	tests := []struct {
		name  string
		plant func(t *testing.T, wt Worktree, p GitPaths, marker string)
	}{
		{"admin dir hooks", func(t *testing.T, wt Worktree, p GitPaths, marker string) {
			plantHooks(t, filepath.Join(p.AdminDir, "hooks"), marker)
		}},
		{"common dir hooks", func(t *testing.T, wt Worktree, p GitPaths, marker string) {
			plantHooks(t, filepath.Join(p.CommonDir, "hooks"), marker)
		}},
		{"config.worktree hooksPath", func(t *testing.T, wt Worktree, p GitPaths, marker string) {
			// The user enabled per-worktree config; the agent writes its own.
			gitT(t, wt.Repo, "config", "extensions.worktreeConfig", "true")
			hooks := filepath.Join(wt.Path, "hooks")
			plantHooks(t, hooks, marker)
			evil := filepath.Join(wt.Path, "evil.sh")
			must(t, os.WriteFile(evil, []byte("#!/bin/sh\necho fsmonitor >> '"+marker+"'\n"), 0o755))
			writeFile(t, p.AdminDir, "config.worktree", "[core]\n\thooksPath = "+hooks+"\n\tfsmonitor = "+evil+"\n")
		}},
		{"config.worktree filter", func(t *testing.T, wt Worktree, p GitPaths, marker string) {
			gitT(t, wt.Repo, "config", "extensions.worktreeConfig", "true")
			evil := filepath.Join(wt.Path, "evil.sh")
			must(t, os.WriteFile(evil, []byte("#!/bin/sh\necho filter >> '"+marker+"'\ncat\n"), 0o755))
			writeFile(t, wt.Path, ".gitattributes", "* filter=evil\n")
			writeFile(t, p.AdminDir, "config.worktree", "[filter \"evil\"]\n\tclean = "+evil+"\n\tsmudge = "+evil+"\n")
			// Control: the agent's own git runs it.
			gitRaw(wt.Path, nil, "add", "-A")
			if !exists(marker) {
				t.Fatalf("control: git add did not run the planted filter; the test would prove nothing")
			}
			must(t, os.Remove(marker))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			m := newManager(t)
			repo := newRepo(t, "repo", nil)
			wt := create(t, m, "s", repo)
			h := hostile{marker: filepath.Join(t.TempDir(), "hooks-ran")}
			tt.plant(t, wt, gitPathsT(t, wt), h.marker)
			writeFile(t, wt.Path, "work.txt", "agent work\n")
			_, err := m.Checkpoint(ctx, wt)
			must(t, err)
			h.check(t, "Checkpoint")
			removeAndCheck(t, m, wt, h)
		})
	}
}

func TestGitPaths(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	common, err := filepath.EvalSymlinks(filepath.Join(repo, ".git"))
	must(t, err)
	view := filepath.Join(m.Root(), ".gitviews", filepath.Base(filepath.Dir(wt.Path)), "s")
	want := GitPaths{CommonDir: common, AdminDir: filepath.Join(common, "worktrees", "s"), Branch: "agentpool/s", View: GitView{
		Dir: view, ObjectsUpper: filepath.Join(view, "objects-upper"), ObjectsWork: filepath.Join(view, "objects-work"),
		Refs: filepath.Join(view, "refs"), Logs: filepath.Join(view, "logs"), Ref: filepath.Join(view, "refs", "s"),
	}}
	// Tampering with the worktree's files changes nothing.
	writeFile(t, wt.Path, ".git", "gitdir: "+filepath.Join(wt.Path, "fake")+"\n")
	writeFile(t, want.AdminDir, "commondir", filepath.Join(wt.Path, "fakecommon")+"\n")

	for _, mm := range []*Manager{m, restarted(t, m)} {
		got, err := mm.GitPaths(ctx, wt)
		if err != nil {
			t.Fatalf("GitPaths() error = %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("GitPaths() (-want +got):\n%s", diff)
		}
		runs := mm.gitRuns.Load()
		for range 3 {
			if again, err := mm.GitPaths(ctx, wt); err != nil || again != got {
				t.Errorf("GitPaths() again = %+v, %v; want %+v", again, err, got)
			}
		}
		if n := mm.gitRuns.Load() - runs; n != 0 {
			t.Errorf("cached GitPaths() ran git %d times; want 0", n)
		}
	}
	if got, want := want.RefDir(), filepath.Join(common, "refs", "heads", "agentpool"); got != want {
		t.Errorf("RefDir() = %q; want %q", got, want)
	}
	if got, want := want.LogDir(), filepath.Join(common, "logs", "refs", "heads", "agentpool"); got != want {
		t.Errorf("LogDir() = %q; want %q", got, want)
	}

	foreign := wt
	foreign.Repo = newRepo(t, "other", nil)
	if _, err := restarted(t, m).GitPaths(ctx, foreign); err == nil {
		t.Errorf("GitPaths() of a worktree under another repository succeeded")
	}
	noRepo := wt
	noRepo.Repo = ""
	if _, err := restarted(t, m).GitPaths(ctx, noRepo); !errors.Is(err, ErrNotRepository) {
		t.Errorf("GitPaths() without a repository error = %v; want ErrNotRepository", err)
	}
}

func TestGitPathsCollidingAdminNames(t *testing.T) {
	// Two checkouts of one repository each have a session "s": git names
	// the second admin directory "s1". The second claims its own, and a
	// forged gitdir in the other one does not steal it.
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	linked := filepath.Join(t.TempDir(), "linked")
	gitT(t, repo, "worktree", "add", "-q", "-b", "feature", linked)
	linked, _ = filepath.EvalSymlinks(linked)
	gitT(t, repo, "worktree", "add", "-q", "--detach", filepath.Join(t.TempDir(), "s")) // takes the name "s"
	w2 := create(t, m, "s", linked)
	got, err := restarted(t, m).GitPaths(ctx, w2)
	must(t, err)
	if got.AdminDir == filepath.Join(got.CommonDir, "worktrees", "s") || readFile(t, got.AdminDir, "gitdir") != w2.Path+"/.git\n" {
		t.Errorf("GitPaths().AdminDir = %s; want the admin dir git made for %s", got.AdminDir, w2.Path)
	}
	// The agent of the other worktree forges its gitdir to claim w2.
	writeFile(t, filepath.Join(got.CommonDir, "worktrees", "s"), "gitdir", w2.Path+"/.git\n")
	again, err := restarted(t, m).GitPaths(ctx, w2)
	if err == nil && again.AdminDir != got.AdminDir {
		t.Errorf("after a forged gitdir GitPaths().AdminDir = %s; want %s or an error", again.AdminDir, got.AdminDir)
	}
}

func BenchmarkGitPathsCached(b *testing.B) {
	ctx := context.Background()
	m := newManager(b)
	repo := newRepo(b, "repo", nil)
	wt := create(b, m, "s", repo)
	if _, err := m.GitPaths(ctx, wt); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := m.GitPaths(ctx, wt); err != nil {
			b.Fatal(err)
		}
	}
}
