package worktree

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// viewT returns wt's view as GitPaths gives it, failing the test without
// one.
func viewT(t *testing.T, m *Manager, wt Worktree) GitView {
	t.Helper()
	p, err := m.GitPaths(context.Background(), wt)
	if err != nil {
		t.Fatalf("GitPaths(%s) error = %v", wt.Session, err)
	}
	if !p.View.Set() {
		t.Fatalf("GitPaths(%s).View is zero; want the worktree's view", wt.Session)
	}
	return p.View
}

// refsIn lists the refs directory of a view.
func refsIn(t *testing.T, v GitView) []string {
	t.Helper()
	ents, err := os.ReadDir(v.Refs)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestViewMadeAndRemovedWithWorktree(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	for _, discard := range []bool{false, true} {
		wt := create(t, m, "s", repo)
		v := viewT(t, m, wt)
		if want := filepath.Join(m.Root(), ".gitviews", filepath.Base(filepath.Dir(wt.Path)), "s"); v.Dir != want {
			t.Errorf("View.Dir = %s; want %s, beside the worktree and outside it", v.Dir, want)
		}
		if fi, err := os.Stat(v.Dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("view directory: %v, %v; want mode 0700", fi, err)
		}
		for _, d := range []string{v.ObjectsUpper, v.ObjectsWork, v.Refs, v.Logs} {
			if ents, err := os.ReadDir(d); err != nil || (d != v.Refs && len(ents) > 0) {
				t.Errorf("view part %s: %v, %v; want an empty directory", d, ents, err)
			}
		}
		if got := refsIn(t, v); !slices.Equal(got, []string{"s"}) {
			t.Errorf("view refs = %v; want the branch's leaf alone", got)
		}
		if got := readFile(t, v.Refs, "s"); got != wt.BaseCommit+"\n" {
			t.Errorf("private ref = %q; want the branch's tip %s", got, wt.BaseCommit)
		}
		p := gitPathsT(t, wt)
		for _, d := range []string{p.RefDir(), p.LogDir()} {
			if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
				t.Errorf("mount point %s: %v", d, err)
			}
		}
		if _, err := m.Remove(ctx, wt, discard); err != nil {
			t.Fatal(err)
		}
		if exists(v.Dir) || exists(filepath.Dir(v.Dir)) {
			t.Errorf("Remove(discard=%t) left the view %s", discard, v.Dir)
		}
	}
}

// TestGitPathsMakesMountPoints: git removes the session branches' ref
// directory once their refs are packed; GitPaths makes it again for the
// view to be mounted on.
func TestGitPathsMakesMountPoints(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	gitT(t, repo, "pack-refs", "--all", "--prune")
	p := gitPathsT(t, wt)
	must(t, os.RemoveAll(p.RefDir()))
	got, err := m.GitPaths(context.Background(), wt)
	must(t, err)
	if fi, err := os.Stat(got.RefDir()); err != nil || !fi.IsDir() || !got.View.Set() {
		t.Errorf("GitPaths() = %+v; RefDir: %v; want the view and its mount point", got, err)
	}
}
