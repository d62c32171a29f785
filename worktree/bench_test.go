package worktree

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const benchFiles = 5000

// genRepo makes a committed repository of n files (50 per directory, about
// 300 bytes each) under b.TempDir.
func genRepo(b *testing.B, n int) string {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "big")
	body := strings.Repeat("some source text for the benchmark repository\n", 6)
	for i := range n {
		writeFile(b, dir, fmt.Sprintf("d%03d/f%04d.txt", i/50, i), fmt.Sprintf("file %d\n%s", i, body))
	}
	gitT(b, dir, "init", "-q", "-b", "main")
	gitT(b, dir, "add", "-A")
	gitT(b, dir, "commit", "-q", "-m", "generated")
	return dir
}

// timeGit runs a raw git command and returns how long it took.
func timeGit(b *testing.B, dir string, args ...string) time.Duration {
	b.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), testIdentity...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	if err != nil {
		b.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return elapsed
}

// report adds the two timings per op and their ratio to the result.
func report(b *testing.B, ours, raw time.Duration, oursName, rawName string) {
	b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), oursName+"-ns/op")
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), rawName+"-ns/op")
	b.ReportMetric(float64(ours)/float64(raw), "ratio")
}

// BenchmarkCreate compares Create with a raw `git worktree add -b` on a
// 5 000-file repository, in the same run, alternating which goes first.
func BenchmarkCreate(b *testing.B) {
	ctx := context.Background()
	repo := genRepo(b, benchFiles)
	m := newManager(b)
	rawRoot := b.TempDir()
	base := gitT(b, repo, "rev-parse", "HEAD")
	var ours, raw time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		session := fmt.Sprintf("s%d", i)
		rawPath := filepath.Join(rawRoot, session)
		var wt Worktree
		runOurs := func() {
			start := time.Now()
			var err error
			if wt, err = m.Create(ctx, session, repo, ""); err != nil {
				b.Fatalf("Create() error = %v", err)
			}
			ours += time.Since(start)
		}
		runRaw := func() { raw += timeGit(b, repo, "worktree", "add", "-q", "-b", "raw/"+session, rawPath, base) }
		if i%2 == 0 {
			runOurs()
			runRaw()
		} else {
			runRaw()
			runOurs()
		}
		b.StopTimer()
		if _, err := m.Remove(ctx, wt, true); err != nil {
			b.Fatal(err)
		}
		gitT(b, repo, "worktree", "remove", "--force", rawPath)
		gitT(b, repo, "branch", "-q", "-D", "raw/"+session)
		b.StartTimer()
	}
	report(b, ours, raw, "create", "git-worktree-add")
}

// BenchmarkCheckpoint compares Checkpoint with `git status --porcelain` on
// a 5 000-file worktree with 10 files changed. In "new-state" one of them
// changes again before every round, so every Checkpoint scans and anchors a
// new commit; in "same-state" nothing changes between rounds, so the change
// tracking answers without git; "same-state-scan" is the same with the
// tracking off (Config.RescanAfter < 0): a scan that finds the state known.
func BenchmarkCheckpoint(b *testing.B) {
	ctx := context.Background()
	repo := genRepo(b, benchFiles)
	m := newManager(b)
	wt := create(b, m, "s", repo)
	untracked, err := NewManager(Config{Root: b.TempDir(), RescanAfter: -1, Logger: m.log})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10 {
		writeFile(b, wt.Path, fmt.Sprintf("d%03d/f%04d.txt", i*7, i*350), fmt.Sprintf("changed %d\n", i))
	}
	timeGit(b, wt.Path, "status", "--porcelain") // as after any agent's first git call
	for _, mode := range []string{"new-state", "same-state", "same-state-scan"} {
		m := m
		if mode == "same-state-scan" {
			m = untracked
		}
		b.Run(mode, func(b *testing.B) {
			var ours, raw time.Duration
			for i := 0; i < b.N; i++ {
				if mode == "new-state" {
					b.StopTimer()
					writeFile(b, wt.Path, "d000/f0000.txt", fmt.Sprintf("round %d\n", i))
					b.StartTimer()
				}
				runOurs := func() {
					start := time.Now()
					if _, err := m.Checkpoint(ctx, wt); err != nil {
						b.Fatalf("Checkpoint() error = %v", err)
					}
					ours += time.Since(start)
				}
				runRaw := func() { raw += timeGit(b, wt.Path, "status", "--porcelain") }
				if i%2 == 0 {
					runOurs()
					runRaw()
				} else {
					runRaw()
					runOurs()
				}
			}
			report(b, ours, raw, "checkpoint", "git-status")
		})
	}
}

// BenchmarkCheckpointUnchanged is the cost of a checkpoint that the change
// tracking answers: nothing changed since the last one (the pool takes one
// before and one after every turn).
//
//	go test -run '^$' -bench CheckpointUnchanged -benchtime 20000x -count 3 ./worktree/
func BenchmarkCheckpointUnchanged(b *testing.B) {
	ctx := context.Background()
	m := newManager(b)
	wt := create(b, m, "s", genRepo(b, benchFiles))
	first, err := m.Checkpoint(ctx, wt)
	if err != nil {
		b.Fatal(err)
	}
	runs := m.gitRuns.Load()
	b.ResetTimer()
	for range b.N {
		if got, err := m.Checkpoint(ctx, wt); err != nil || got != first {
			b.Fatalf("Checkpoint() = %s, %v; want %s", got, err, first)
		}
	}
	b.StopTimer()
	if n := m.gitRuns.Load() - runs; n != 0 {
		b.Fatalf("%d git commands for %d unchanged checkpoints; want none", n, b.N)
	}
}
