package worktree

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSnapForks checks that Snap reads a worktree's uncommitted state
// without touching it, and that a worktree made at its head and restored
// to its tree holds that state as uncommitted work.
func TestSnapForks(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", roundTripFiles)
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "debug.log", "ignored\n")
	changeEverything(t, wt.Path)
	status := gitT(t, wt.Path, "status", "--porcelain")
	filesBefore, gitBefore := snapshotFiles(t, wt.Path), readGitState(t, wt)
	time.Sleep(10 * time.Millisecond)

	snap, err := m.Snap(ctx, wt)
	if err != nil {
		t.Fatalf("Snap() error = %v", err)
	}
	if diff := cmp.Diff(filesBefore, snapshotFiles(t, wt.Path)); diff != "" {
		t.Errorf("Snap() touched files (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(gitBefore, readGitState(t, wt)); diff != "" {
		t.Errorf("Snap() touched HEAD or the index (-before +after):\n%s", diff)
	}
	if snap.Head != wt.BaseCommit {
		t.Errorf("Snap().Head = %s; want %s", snap.Head, wt.BaseCommit)
	}
	if _, err := os.Stat(filepath.Join(gitT(t, repo, "rev-parse", "--git-common-dir"), "refs", "agentpool")); err == nil {
		if out := gitT(t, repo, "for-each-ref", CheckpointRefPrefix+"s"); out != "" {
			t.Errorf("Snap() anchored a checkpoint: %s", out)
		}
	}

	fork, err := m.Create(ctx, "f", repo, snap.Head)
	if err != nil {
		t.Fatalf("Create() error = %v", err)
	}
	if err := m.Restore(ctx, fork, snap.Tree); err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	// What was staged is uncommitted work of the fork, not staged.
	want := strings.Join(sortedLines(strings.ReplaceAll(status, "A  staged.txt", "?? staged.txt")), "\n")
	if got := strings.Join(sortedLines(gitT(t, fork.Path, "status", "--porcelain")), "\n"); got != want {
		t.Errorf("fork's git status =\n%s\nwant the source's\n%s", got, want)
	}
	for name, st := range filesBefore {
		if name == "debug.log" || strings.HasPrefix(name, "build") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(fork.Path, name))
		if st.Mode.IsRegular() && (err != nil || string(b) != st.Content) {
			t.Errorf("fork's %s = %q, %v; want %q", name, b, err, st.Content)
		}
	}
	if _, err := os.Stat(filepath.Join(fork.Path, "debug.log")); err == nil {
		t.Errorf("an ignored file reached the fork")
	}
}

func sortedLines(s string) []string {
	l := strings.Split(s, "\n")
	sort.Strings(l)
	return l
}
