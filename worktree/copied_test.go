package worktree

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// treeFiles lists the files of tree-ish rev in repo.
func treeFiles(t *testing.T, repo, rev string) []string {
	t.Helper()
	return strings.Split(gitT(t, repo, "ls-tree", "-r", "--name-only", "--full-tree", rev), "\n")
}

// copiedSetup makes a repository whose trusted setup copies the untracked
// (not ignored) secret.env, and a worktree of it with the setup run.
func copiedSetup(t *testing.T, m *Manager) (string, Worktree) {
	t.Helper()
	repo := newRepo(t, "repo", map[string]string{"README.md": "hello\n", SetupFileName: `{"copy": ["secret.env"]}`})
	writeFile(t, repo, "secret.env", "TOKEN=hunter2\n")
	trustRepo(t, m, repo)
	wt := create(t, m, "s", repo)
	var rec setupRecorder
	if end, err := m.RunSetup(context.Background(), wt, rec.report); err != nil || !end.OK {
		t.Fatalf("RunSetup() = %+v, %v; want ok", end, err)
	}
	if readFile(t, wt.Path, "secret.env") != "TOKEN=hunter2\n" {
		t.Fatal("the setup did not copy secret.env")
	}
	return repo, wt
}

func TestCopiedFilesAreNeverCommitted(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo, wt := copiedSetup(t, m)

	first, err := m.Checkpoint(ctx, wt)
	if err != nil {
		t.Fatalf("Checkpoint() error = %v", err)
	}
	if files := treeFiles(t, repo, first); slices.Contains(files, "secret.env") {
		t.Errorf("checkpoint before the first turn holds %v; want no secret.env", files)
	}
	// A turn: the agent works, and edits the copied secret too.
	writeFile(t, wt.Path, "work.txt", "the session's work\n")
	writeFile(t, wt.Path, "secret.env", "TOKEN=changed-by-the-agent\n")
	after, err := m.Checkpoint(ctx, wt)
	if err != nil {
		t.Fatalf("Checkpoint() error = %v", err)
	}
	if files := treeFiles(t, repo, after); slices.Contains(files, "secret.env") || !slices.Contains(files, "work.txt") {
		t.Errorf("checkpoint after the turn holds %v; want work.txt and no secret.env", files)
	}

	d, err := m.Diff(ctx, wt, "", "")
	if err != nil {
		t.Fatalf("Diff() error = %v", err)
	}
	for _, f := range d.Files {
		if f.Path == "secret.env" {
			t.Errorf("Diff().Files lists %+v; want secret.env only as copied", f)
		}
	}
	if strings.Contains(d.Patch, "TOKEN") || strings.Contains(d.Patch, "secret.env") {
		t.Errorf("Diff().Patch shows the copied file:\n%s", d.Patch)
	}
	if want := []CopiedFile{{Path: "secret.env", Present: true}}; !slices.Equal(d.Copied, want) {
		t.Errorf("Diff().Copied = %+v; want %+v", d.Copied, want)
	}

	// The record outlives the Manager: a restarted daemon leaves it out too.
	m2, err := NewManager(Config{Root: m.Root(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("NewManager() error = %v", err)
	}
	t.Cleanup(func() { m2.Close() })
	writeFile(t, wt.Path, "more.txt", "more\n")
	cp, err := m2.Checkpoint(ctx, wt)
	if err != nil {
		t.Fatalf("Checkpoint() after a restart error = %v", err)
	}
	if files := treeFiles(t, repo, cp); slices.Contains(files, "secret.env") {
		t.Errorf("checkpoint after a restart holds %v; want no secret.env", files)
	}

	res, err := m2.Merge(ctx, wt, MergeOptions{Into: "main", Squash: true})
	if err != nil {
		t.Fatalf("Merge(squash) error = %v", err)
	}
	if res.Method != MergeSquash {
		t.Errorf("Merge() = %+v; want a squash", res)
	}
	for _, rev := range []string{"main", "agentpool/s"} {
		if files := treeFiles(t, repo, rev); slices.Contains(files, "secret.env") || !slices.Contains(files, "work.txt") {
			t.Errorf("%s holds %v; want work.txt and no secret.env", rev, files)
		}
	}
	if got := readFile(t, repo, "secret.env"); got != "TOKEN=hunter2\n" {
		t.Errorf("the main checkout's secret.env = %q; want it untouched", got)
	}

	// Closing: the auto-commit leaves the copy out, and the copy goes.
	writeFile(t, wt.Path, "last.txt", "last\n")
	rr, err := m2.Remove(ctx, wt, false)
	if err != nil {
		t.Fatalf("Remove() error = %v", err)
	}
	if !rr.Committed {
		t.Errorf("Remove() = %+v; want last.txt committed", rr)
	}
	if files := treeFiles(t, repo, "agentpool/s"); slices.Contains(files, "secret.env") || !slices.Contains(files, "last.txt") {
		t.Errorf("the branch after close holds %v; want last.txt and no secret.env", files)
	}
	if log := gitT(t, repo, "log", "--all", "--format=%H", "--", "secret.env"); log != "" {
		t.Errorf("commits touching secret.env: %s; want none", log)
	}
	if _, err := m2.Prune(ctx, wt, PruneOptions{}); err != nil {
		t.Fatalf("Prune() error = %v", err)
	}
	if exists(m2.copiedFile(wt.Path)) {
		t.Error("the record of copied files outlived the session")
	}
}

func TestCopiedListIsOutOfTheAgentsReach(t *testing.T) {
	m := newManager(t)
	_, wt := copiedSetup(t, m)
	rec := m.copiedFile(wt.Path)
	if !exists(rec) {
		t.Fatalf("no record of copied files at %s", rec)
	}
	gp := gitPathsT(t, wt)
	for _, dir := range []string{wt.Path, gp.AdminDir, gp.CommonDir} {
		if within(dir, rec) {
			t.Errorf("the record %s is inside %s, which the agent can write", rec, dir)
		}
	}
	if !within(m.Root(), filepath.Dir(rec)) {
		t.Errorf("the record %s is not in the Manager's own directory", rec)
	}
}

// TestMergeRefusesACopiedFileTheAgentCommitted: an agent may commit a copy
// with its own git; no merge brings it in, before or after the worktree
// is removed. The commit of the session's work takes it off the branch,
// so a squash (the final tree only) merges; a merge of the history does
// not.
func TestMergeRefusesACopiedFileTheAgentCommitted(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo, wt := copiedSetup(t, m)
	writeFile(t, wt.Path, "work.txt", "work\n")
	gitT(t, wt.Path, "add", "secret.env", "work.txt")
	gitT(t, wt.Path, "commit", "-q", "-m", "the agent commits everything")
	main, tip := branchTip(t, repo, "main"), branchTip(t, repo, "agentpool/s")
	if _, err := m.Merge(ctx, wt, MergeOptions{Into: "main"}); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "secret.env") {
		t.Errorf("Merge() error = %v; want ErrConflict naming secret.env", err)
	}
	if got := branchTip(t, repo, "agentpool/s"); got != tip {
		t.Errorf("the refused merge moved the session branch to %s; want %s", got, tip)
	}
	if _, err := m.Remove(ctx, wt, false); err != nil {
		t.Fatalf("Remove() error = %v", err)
	}
	if files := treeFiles(t, repo, "agentpool/s"); slices.Contains(files, "secret.env") {
		t.Errorf("the branch after close holds %v; want no secret.env", files)
	}
	if _, err := m.Merge(ctx, wt, MergeOptions{Into: "main"}); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "secret.env") {
		t.Errorf("Merge() of the closed session's branch error = %v; want ErrConflict naming secret.env", err)
	}
	if got := branchTip(t, repo, "main"); got != main {
		t.Fatalf("main moved to %s after refused merges; want %s", got, main)
	}
	res, err := m.Merge(ctx, wt, MergeOptions{Into: "main", Squash: true})
	if err != nil || res.Method != MergeSquash {
		t.Fatalf("Merge(squash) = %+v, %v; want a squash", res, err)
	}
	if files := treeFiles(t, repo, "main"); slices.Contains(files, "secret.env") || !slices.Contains(files, "work.txt") {
		t.Errorf("main holds %v; want work.txt and no secret.env", files)
	}
	if log := gitT(t, repo, "log", "--format=%H", "main", "--", "secret.env"); log != "" {
		t.Errorf("commits of main touching secret.env: %s; want none", log)
	}
}
