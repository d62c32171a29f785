package main

import (
	"context"
	"encoding/json"
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
// answer; its agent is running), fork_ms and fork_ready_ms (a fork that
// adopts a spare: its answer, and its agent.ready, which comes before the
// answer), fork_cold_ms and fork_cold_ready_ms (a fork made while no
// spare is ready: its answer, then its agent starts), files_ms (of the
// fork from a spare, the copy of the uncommitted work: reading the
// session's files and putting them in the fork, as its session.forked
// says), and fork_vs_goal: fork_ready_ms / (spare_ms + files_ms), the
// goal being a fork ready as fast as a create from a spare plus the copy
// of the uncommitted work (1.0; the rest is the history's copy and rows).
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
	var spare, fork, ready, cold, coldReady, copyFiles []time.Duration
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
		// No spare is ready now: its replacement starts a moment later.
		start = time.Now()
		fc, err := c.Fork(ctx, src.ID, httpapi.ForkRequest{})
		if err != nil {
			b.Fatal(err)
		}
		cold = append(cold, time.Since(start))
		if strings.HasPrefix(fc.ID, pool.SpareIDPrefix) {
			b.Fatalf("fork %d adopted a spare; want one made without", i)
		}
		coldReady = append(coldReady, waitAgentReady(b, c, fc.ID, start))
		b.StopTimer()
		waitSparesReady(b, c, 1)
		b.StartTimer()
		start = time.Now()
		f, err := c.Fork(ctx, src.ID, httpapi.ForkRequest{})
		if err != nil {
			b.Fatal(err)
		}
		fork = append(fork, time.Since(start))
		if !strings.HasPrefix(f.ID, pool.SpareIDPrefix) {
			b.Fatalf("fork %d did not adopt the ready spare: %s", i, f.ID)
		}
		ready = append(ready, waitAgentReady(b, c, f.ID, start))
		b.StopTimer()
		copyFiles = append(copyFiles, forkedFilesTook(b, c, f.ID))
		for _, id := range []string{s.ID, fc.ID, f.ID} {
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
	b.ReportMetric(ms(median(cold)), "fork_cold_ms")
	b.ReportMetric(ms(median(coldReady)), "fork_cold_ready_ms")
	b.ReportMetric(ms(median(copyFiles)), "files_ms")
	goal := median(spare) + median(copyFiles)
	b.ReportMetric(float64(median(ready))/float64(goal), "fork_vs_goal")
	b.Logf("agent=%s: create from a spare %v; fork from a spare %v (agent ready %v, of which copying the files %v: %.2f× the goal, a create from a spare plus that copy); fork without a spare %v (agent ready %v); medians of %d",
		agent, median(spare), median(fork), median(ready), median(copyFiles), float64(median(ready))/float64(goal), median(cold), median(coldReady), len(spare))
}

// forkedFilesTook reads, from the fork's session.forked, how long the
// copy of its files took.
func forkedFilesTook(b *testing.B, c *httpapi.Client, session string) time.Duration {
	b.Helper()
	evs, err := c.EventLog(context.Background(), session, 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == pool.EventSessionForked {
			var d struct {
				FilesMs float64 `json:"files_ms"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				b.Fatal(err)
			}
			return time.Duration(d.FilesMs * float64(time.Millisecond))
		}
	}
	b.Fatalf("no session.forked in %s", session)
	return 0
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
