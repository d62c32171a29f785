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

// TestStartAtMovesOnlyTheBranch starts a spare's worktree, made at the
// repository's head, at a session's own commit: its branch and index
// move there, its files stay, and neither the repository's HEAD nor its
// other branches move. Restore then gives it the session's files.
func TestStartAtMovesOnlyTheBranch(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", map[string]string{"a.txt": "a\n"})
	head := strings.TrimSpace(gitT(t, repo, "rev-parse", "HEAD"))
	src := create(t, m, "s", repo)
	writeFile(t, src.Path, "b.txt", "the session's commit\n")
	gitT(t, src.Path, "add", "b.txt")
	gitT(t, src.Path, "commit", "-q", "-m", "session commit")
	own := strings.TrimSpace(gitT(t, src.Path, "rev-parse", "HEAD"))
	writeFile(t, src.Path, "a.txt", "uncommitted\n")
	snap, err := m.Snap(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	spare := create(t, m, "spare", repo)
	if err := m.StartAt(ctx, spare, snap.Head); err != nil {
		t.Fatalf("StartAt() error = %v", err)
	}
	if got := strings.TrimSpace(gitT(t, repo, "rev-parse", "HEAD")); got != head {
		t.Errorf("the repository's HEAD moved to %s; want %s", got, head)
	}
	if got := strings.TrimSpace(gitT(t, spare.Path, "rev-parse", "HEAD")); got != own {
		t.Errorf("spare's HEAD = %s; want the session's commit %s", got, own)
	}
	// Its files are still the head's, its index the commit's: b.txt is
	// missing from its files.
	if got := gitT(t, spare.Path, "status", "--porcelain"); got != " D b.txt" {
		t.Errorf("spare's status after StartAt = %q; want b.txt missing from its files only", got)
	}
	if err := m.Restore(ctx, spare, snap.Tree); err != nil {
		t.Fatal(err)
	}
	if got, want := gitT(t, spare.Path, "status", "--porcelain"), gitT(t, src.Path, "status", "--porcelain"); got != want {
		t.Errorf("spare's status = %q; want the session's %q", got, want)
	}
	if err := m.StartAt(ctx, spare, "no-such-commit"); err == nil {
		t.Errorf("StartAt(no-such-commit) = nil; want an error")
	}
}
