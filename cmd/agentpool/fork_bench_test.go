package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// BenchmarkFork measures, in one run, POST /v1/sessions/{id}/fork of a
// session with 10 turns and 100 uncommitted files (50 changed, 50 new)
// beside POST /v1/sessions adopting a spare, with the demo agent starting
// at once (agent=fast) or after 1.5 s (agent=slow, BenchmarkSpares'
// agent). Reported, medians over the iterations: spare_ms (the create's
// answer; its agent is running), fork_ms (the fork's answer: worktree,
// copy of the uncommitted files and of the history, rows) and
// fork_ready_ms (until the fork's agent.ready: its agent is started
// after the answer, as for a create without a spare).
func BenchmarkFork(b *testing.B) {
	for _, agent := range []struct {
		name  string
		delay int
	}{{"fast", 0}, {"slow", 1500}} {
		b.Run("agent="+agent.name, func(b *testing.B) { benchFork(b, agent.name, agent.delay) })
	}
}

func benchFork(b *testing.B, agent string, delay int) {
	bin := agentpoolBinary(b)
	home := b.TempDir()
	writeScripted(b, home, bin, map[string]any{agent: spareScript(delay)})
	repo := e2eRepoAtB(b, filepath.Join(b.TempDir(), "repo"))
	files := map[string]string{}
	for i := range 50 {
		files[fmt.Sprintf("src/f%03d.txt", i)] = strings.Repeat(fmt.Sprintf("line %d\n", i), 40)
	}
	commitFiles(b, repo, files)
	_, c, _ := startBenchDaemon(b, bin, home, "--log-level", "warn", "--max-warm", "64", "--spares", agent+"=1", "--spares-repo", repo)
	ctx := context.Background()
	src, err := c.CreateSession(ctx, pool.CreateRequest{ID: "source", Repo: repo, Agent: agent})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10 {
		if _, err := c.Prompt(ctx, src.ID, "", fmt.Sprintf("turn %d", i+1), true); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 50 {
		writeFileB(b, src.Worktree.Path, fmt.Sprintf("src/f%03d.txt", i), "changed\n")
		writeFileB(b, src.Worktree.Path, fmt.Sprintf("new/n%03d.txt", i), strings.Repeat("new\n", 100))
	}
	var spare, fork, ready []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		waitSparesReady(b, c, 1)
		b.StartTimer()
		start := time.Now()
		s, err := c.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: agent})
		if err != nil {
			b.Fatal(err)
		}
		spare = append(spare, time.Since(start))
		if !strings.HasPrefix(s.ID, pool.SpareIDPrefix) {
			b.Fatalf("create %d did not adopt a spare: %s", i, s.ID)
		}
		start = time.Now()
		f, err := c.Fork(ctx, src.ID, httpapi.ForkRequest{})
		if err != nil {
			b.Fatal(err)
		}
		fork = append(fork, time.Since(start))
		ready = append(ready, waitAgentReady(b, c, f.ID, start))
		b.StopTimer()
		for _, id := range []string{s.ID, f.ID} {
			if _, err := c.CloseSession(ctx, id, true); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(median(spare)), "spare_ms")
	b.ReportMetric(ms(median(fork)), "fork_ms")
	b.ReportMetric(ms(median(ready)), "fork_ready_ms")
	b.Logf("agent=%s: create from a spare %v, fork %v (its agent ready after %v); medians of %d", agent, median(spare), median(fork), median(ready), len(spare))
}

// waitAgentReady polls the session's events until its agent.ready and
// returns the time from start.
func waitAgentReady(b *testing.B, c *httpapi.Client, session string, start time.Time) time.Duration {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		evs, err := c.EventLog(context.Background(), session, 0)
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == backends.EventAgentReady && ev.Time.After(start) {
				return time.Since(start)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("no agent.ready in %s", session)
	return 0
}

func writeFileB(b *testing.B, dir, name, content string) {
	b.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		b.Fatal(err)
	}
}

// commitFiles commits files to repo.
func commitFiles(b *testing.B, repo string, files map[string]string) {
	b.Helper()
	for name, content := range files {
		writeFileB(b, repo, name, content)
	}
	for _, args := range [][]string{{"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "files"}} {
		if out, err := execGit(repo, args...); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

func execGit(dir string, args ...string) ([]byte, error) {
	return exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
}
