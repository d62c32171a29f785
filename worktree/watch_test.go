package worktree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// truth is the snapshot of the worktree taken by git alone, without the
// change tracking: what Checkpoint must return.
func truth(t *testing.T, m *Manager, wt Worktree) string {
	t.Helper()
	l, err := m.open(context.Background(), wt)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := m.snapshot(context.Background(), l)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return tree
}

// checkpointT takes a checkpoint and reports whether it ran git.
func checkpointT(t *testing.T, m *Manager, wt Worktree) (tree string, ranGit bool) {
	t.Helper()
	before := m.gitRuns.Load()
	tree, err := m.Checkpoint(context.Background(), wt)
	if err != nil {
		t.Fatalf("Checkpoint(%s) error = %v", wt.Session, err)
	}
	return tree, m.gitRuns.Load() != before
}

func TestCheckpointUnchangedRunsNoGit(t *testing.T) {
	m := newManager(t)
	wt := create(t, m, "s1", newRepo(t, "repo", nil))
	writeFile(t, wt.Path, "notes.txt", "not fresh any more\n") // see fresh_test.go
	first, ran := checkpointT(t, m, wt)
	if !ran {
		t.Fatal("first Checkpoint ran no git; want a scan")
	}
	for i := range 3 {
		got, ran := checkpointT(t, m, wt)
		if ran || got != first {
			t.Fatalf("Checkpoint #%d of an unchanged worktree = %s (ran git: %v); want %s without git", i+2, got, ran, first)
		}
	}
	if got := truth(t, m, wt); got != first {
		t.Fatalf("git snapshot = %s; want %s", got, first)
	}
}

// TestCheckpointSeesEveryChange makes one kind of change after a
// checkpoint, and checks that the next checkpoint scans and agrees with git.
func TestCheckpointSeesEveryChange(t *testing.T) {
	outside := t.TempDir()
	tests := []struct {
		name   string
		change func(t *testing.T, wt Worktree)
	}{
		{"modify same size", func(t *testing.T, wt Worktree) { writeFile(t, wt.Path, "README.md", "HELLO\n") }},
		{"chmod +x", func(t *testing.T, wt Worktree) {
			if err := os.Chmod(filepath.Join(wt.Path, "README.md"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"delete", func(t *testing.T, wt Worktree) { mustRemove(t, filepath.Join(wt.Path, "src", "a.go")) }},
		{"new nested dirs", func(t *testing.T, wt Worktree) { writeFile(t, wt.Path, "x/y/z/new.txt", "deep\n") }},
		{"symlink", func(t *testing.T, wt Worktree) {
			if err := os.Symlink("README.md", filepath.Join(wt.Path, "link")); err != nil {
				t.Fatal(err)
			}
		}},
		{"rename dir", func(t *testing.T, wt Worktree) {
			if err := os.Rename(filepath.Join(wt.Path, "src"), filepath.Join(wt.Path, "lib")); err != nil {
				t.Fatal(err)
			}
		}},
		{"dir moved in from outside", func(t *testing.T, wt Worktree) {
			dir := filepath.Join(outside, wt.Session)
			writeFile(t, dir, "deep/er/file.txt", "moved in\n")
			if err := os.Rename(dir, filepath.Join(wt.Path, "moved")); err != nil {
				t.Fatal(err)
			}
		}},
		{"gitignore unignores", func(t *testing.T, wt Worktree) { writeFile(t, wt.Path, ".gitignore", "") }},
		{"info/exclude ignores", func(t *testing.T, wt Worktree) {
			writeFile(t, gitPathsT(t, wt).CommonDir, "info/exclude", "notes.txt\n")
		}},
		{"ignored file force-added to the index", func(t *testing.T, wt Worktree) {
			gitT(t, wt.Path, "add", "-f", "build.log")
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t)
			repo := newRepo(t, "repo", map[string]string{"README.md": "hello\n", "src/a.go": "package a\n", ".gitignore": "*.log\n"})
			wt := create(t, m, fmt.Sprintf("s%d", i), repo)
			writeFile(t, wt.Path, "build.log", "ignored\n")
			writeFile(t, wt.Path, "notes.txt", "untracked\n")
			before, _ := checkpointT(t, m, wt)
			if again, ran := checkpointT(t, m, wt); ran || again != before {
				t.Fatalf("second Checkpoint = %s (ran git: %v); want %s from the tracking", again, ran, before)
			}
			tt.change(t, wt)
			got, ran := checkpointT(t, m, wt)
			if want := truth(t, m, wt); got != want || !ran || got == before {
				t.Fatalf("Checkpoint after the change = %s (ran git: %v); want %s from a scan (before: %s)", got, ran, want, before)
			}
			if again, ran := checkpointT(t, m, wt); ran || again != got {
				t.Fatalf("Checkpoint after that = %s (ran git: %v); want %s from the tracking", again, ran, got)
			}
		})
	}
}

// TestCheckpointWatchesNewDirectories changes a file inside a directory
// that was created (or moved in) after the first checkpoint, in a later
// round, so only a watch added for it can report the change.
func TestCheckpointWatchesNewDirectories(t *testing.T) {
	m := newManager(t)
	wt := create(t, m, "s1", newRepo(t, "repo", nil))
	checkpointT(t, m, wt)
	writeFile(t, wt.Path, "a/b/c/f.txt", "one\n")
	dir := filepath.Join(t.TempDir(), "in")
	writeFile(t, dir, "d/e/g.txt", "one\n")
	if err := os.Rename(dir, filepath.Join(wt.Path, "in")); err != nil {
		t.Fatal(err)
	}
	mid, _ := checkpointT(t, m, wt)
	for _, name := range []string{"a/b/c/f.txt", "in/d/e/g.txt"} {
		writeFile(t, wt.Path, name, "two\n")
		got, ran := checkpointT(t, m, wt)
		if want := truth(t, m, wt); got != want || !ran || got == mid {
			t.Fatalf("Checkpoint after writing %s = %s (ran git: %v); want %s from a scan", name, got, ran, want)
		}
		mid = got
	}
}

// TestCheckpointConcurrentWriter writes files while checkpoints are taken;
// once the writer stops, a checkpoint must hold its last write.
func TestCheckpointConcurrentWriter(t *testing.T) {
	m := newManager(t)
	wt := create(t, m, "s1", newRepo(t, "repo", nil))
	for round := range 20 {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				name := filepath.Join(wt.Path, fmt.Sprintf("d%d", i%3), fmt.Sprintf("f%d", i%5))
				os.MkdirAll(filepath.Dir(name), 0o755)
				os.WriteFile(name, []byte(fmt.Sprintf("%d %d\n", round, i)), 0o644)
			}
		}()
		for range 3 {
			// git itself can fail on a file truncated as it reads it,
			// even after the retries; the checkpoint after the writer
			// stops is what must hold.
			if _, err := m.Checkpoint(context.Background(), wt); err != nil && !strings.Contains(err.Error(), "short read") {
				t.Fatal(err)
			}
		}
		wg.Wait()
		got, _ := checkpointT(t, m, wt)
		if want := truth(t, m, wt); got != want {
			t.Fatalf("round %d: Checkpoint after the writer stopped = %s; git says %s", round, got, want)
		}
	}
}

// TestCheckpointQueueOverflow loses events to a full inotify queue: the
// tracking must fall back to a scan.
func TestCheckpointQueueOverflow(t *testing.T) {
	limit := 16384
	if b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events"); err == nil {
		fmt.Sscan(string(b), &limit)
	}
	if limit > 1<<16 {
		t.Skipf("max_queued_events is %d; too many files to overflow it here", limit)
	}
	m := newManager(t)
	wt := create(t, m, "s1", newRepo(t, "repo", map[string]string{"many/f00000": "x"}))
	checkpointT(t, m, wt)
	// Create, modify and close-write: three events per file.
	for i := range limit/3 + 100 {
		writeFile(t, wt.Path, fmt.Sprintf("many/f%05d", i), "x")
	}
	got, ran := checkpointT(t, m, wt)
	if want := truth(t, m, wt); got != want || !ran {
		t.Fatalf("Checkpoint after an overflow = %s (ran git: %v); want %s from a scan", got, ran, want)
	}
	if m.changes.overflow == 0 {
		t.Fatalf("no queue overflow seen after %d files; the test did not test it", limit/3+100)
	}
	writeFile(t, wt.Path, "many/f00001", "y")
	if got2, ran := checkpointT(t, m, wt); got2 == got || !ran {
		t.Fatalf("Checkpoint after a write following the overflow = %s (ran git: %v); want a new scan", got2, ran)
	}
}

func TestCheckpointTrustAgeAndLimits(t *testing.T) {
	t.Run("rescan after the trust age", func(t *testing.T) {
		m := newManager(t)
		now := time.Now()
		m.changes.now = func() time.Time { return now }
		wt := create(t, m, "s1", newRepo(t, "repo", nil))
		first, _ := checkpointT(t, m, wt)
		now = now.Add(DefaultRescanAfter - time.Second)
		if _, ran := checkpointT(t, m, wt); ran {
			t.Fatal("Checkpoint within the trust age ran git")
		}
		now = now.Add(2 * time.Second)
		if got, ran := checkpointT(t, m, wt); !ran || got != first {
			t.Fatalf("Checkpoint past the trust age = %s (ran git: %v); want %s from a scan", got, ran, first)
		}
	})
	t.Run("tracking off", func(t *testing.T) {
		m, err := NewManager(Config{Root: t.TempDir(), RescanAfter: -1})
		if err != nil {
			t.Fatal(err)
		}
		wt := create(t, m, "s1", newRepo(t, "repo", nil))
		checkpointT(t, m, wt)
		if _, ran := checkpointT(t, m, wt); !ran {
			t.Fatal("Checkpoint with RescanAfter < 0 ran no git")
		}
	})
	t.Run("too many directories", func(t *testing.T) {
		m := newManager(t)
		m.changes.maxDirs = 2
		wt := create(t, m, "s1", newRepo(t, "repo", map[string]string{"a/b/c.txt": "c\n"}))
		checkpointT(t, m, wt)
		if _, ran := checkpointT(t, m, wt); !ran {
			t.Fatal("Checkpoint of a worktree over the directory limit ran no git")
		}
		if n := len(m.changes.byWD); n != 0 {
			t.Fatalf("%d watches left for an untracked worktree; want 0", n)
		}
	})
	t.Run("closed", func(t *testing.T) {
		m := newManager(t)
		wt := create(t, m, "s1", newRepo(t, "repo", nil))
		checkpointT(t, m, wt)
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if _, ran := checkpointT(t, m, wt); !ran {
			t.Fatal("Checkpoint after Close ran no git")
		}
	})
	t.Run("remove forgets", func(t *testing.T) {
		m := newManager(t)
		wt := create(t, m, "s1", newRepo(t, "repo", nil))
		checkpointT(t, m, wt)
		if n := len(m.changes.byWD); n == 0 {
			t.Fatal("no watches after a checkpoint")
		}
		if _, err := m.Remove(context.Background(), wt, true); err != nil {
			t.Fatal(err)
		}
		if n, trees := len(m.changes.byWD), len(m.changes.trees); n != 0 || trees != 0 {
			t.Fatalf("after Remove: %d watches, %d trees tracked; want none", n, trees)
		}
	})
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotSeesRacilyCleanChange: a file changed without changing its
// size, in the same second as the index that recorded it was written, is
// in the snapshot: the copy of the index keeps the index's time, so git
// compares such an entry by content instead of trusting its stat.
func TestSnapshotSeesRacilyCleanChange(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", map[string]string{"README.md": "hello\n"})
	// ctime cannot be set back: make git ignore it, as it does on file
	// systems where it is unreliable, so that the test can place the
	// change in the index's second without racing the clock.
	gitT(t, repo, "config", "core.trustctime", "false")
	wt := create(t, m, "s", repo)
	before := truth(t, m, wt)
	file := filepath.Join(wt.Path, "README.md")
	index := filepath.Join(gitPathsT(t, wt).AdminDir, "index")
	// The index records the file at a time a minute ago, and is itself
	// of that second, as a checkout then would have left them.
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	if err := os.Chtimes(file, at, at); err != nil {
		t.Fatal(err)
	}
	gitT(t, wt.Path, "update-index", "--refresh")
	writeFile(t, wt.Path, "README.md", "HELLO\n")
	for _, p := range []string{file, index} {
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	if got := truth(t, m, wt); got == before {
		t.Fatalf("snapshot after a same-size change = %s, the tree before it", got)
	}
}
