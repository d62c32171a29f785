package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// benchDaemon starts the real daemon for a benchmark with extra serve
// arguments and env, and returns its client; it is stopped at cleanup.
func benchDaemon(b *testing.B, args []string, env ...string) *httpapi.Client {
	b.Helper()
	bin := agentpoolBinary(b)
	home := b.TempDir()
	writeScripted(b, home, bin, map[string]any{"slow": spareScript(1500)})
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		b.Setenv(k, v)
	}
	_, client, _ := startBenchDaemon(b, bin, home, append([]string{"--log-level", "warn"}, args...)...)
	return client
}

var errFirstToken = errors.New("first token")

// firstToken prompts session and returns the time from start to its
// turn's first message chunk on the session's stream.
func firstToken(ctx context.Context, c *httpapi.Client, session string, start time.Time) (time.Duration, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var got time.Duration
	subscribed := make(chan struct{})
	done := make(chan error, 1)
	var once sync.Once
	go func() {
		done <- c.Events(sctx, session, 0, func(ev backends.Event) error {
			once.Do(func() { close(subscribed) })
			if ev.Type == backends.EventMessageChunk && ev.Turn > 0 {
				got = time.Since(start)
				return errFirstToken
			}
			return nil
		})
	}()
	select {
	case <-subscribed: // session.created is always there
	case err := <-done:
		return 0, fmt.Errorf("subscribe: %w", err)
	}
	if _, err := c.Prompt(sctx, session, "", "go", false); err != nil {
		return 0, err
	}
	if err := <-done; !errors.Is(err, errFirstToken) {
		return 0, fmt.Errorf("no first token: %w", err)
	}
	return got, nil
}

// BenchmarkSpares measures, with the demo agent slowed to a 1.5 s start,
// the time from POST /v1/sessions to the first token of the session's
// first prompt when spares are kept (2 per repository), against a warm
// prompt's first token in the same run, for 1, 10 and 50 sessions
// created at once: the first two adopt spares, the others start their
// agent. Reported: warm_ms, the median and the slowest create→first
// token (create_p50_ms, create_max_ms), the fastest's POST /v1/sessions
// alone (create_call_ms), how many sessions adopted a spare,
// and ratio_first = the first session's time over warm_ms. Run it with
// -benchtime 1x.
func BenchmarkSpares(b *testing.B) {
	for _, n := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			repo := e2eRepoAtB(b, filepath.Join(b.TempDir(), "repo"))
			c := benchDaemon(b, []string{"--max-warm", "64", "--spares", "slow=2", "--spares-repo", repo},
				"AGENTPOOL_WORKTREES="+filepath.Join(b.TempDir(), "trees"))
			ctx := context.Background()
			var warm, first, p50, worst, createCall time.Duration
			adopted := 0
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				// The warm reference: a session whose agent has started and
				// served a prompt.
				ws, err := c.CreateSession(ctx, pool.CreateRequest{ID: fmt.Sprintf("warm-%d", i), Repo: repo, Agent: "slow"})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Prompt(ctx, ws.ID, "", "start", true); err != nil {
					b.Fatal(err)
				}
				w, err := firstToken(ctx, c, ws.ID, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				warm += w
				waitSparesReady(b, c, 2)
				b.StartTimer()
				times := make([]time.Duration, n)
				calls := make([]time.Duration, n)
				ids := make([]string, n)
				var wg sync.WaitGroup
				errs := make(chan error, n)
				for j := 0; j < n; j++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						start := time.Now()
						s, err := c.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "slow"})
						if err != nil {
							errs <- err
							return
						}
						ids[j] = s.ID
						calls[j] = time.Since(start)
						d, err := firstToken(ctx, c, s.ID, start)
						if err != nil {
							errs <- err
							return
						}
						times[j] = d
					}()
				}
				wg.Wait()
				b.StopTimer()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				for _, id := range ids {
					if strings.HasPrefix(id, pool.SpareIDPrefix) {
						adopted++
					}
				}
				sorted := slices.Clone(times)
				slices.Sort(sorted)
				fastest := slices.Index(times, sorted[0])
				createCall += calls[fastest]
				first += sorted[0]
				p50 += sorted[len(sorted)/2]
				worst += sorted[len(sorted)-1]
				for _, id := range append(ids, ws.ID) {
					_, _ = c.CloseSession(ctx, id, true)
				}
				b.StartTimer()
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(per(warm), "warm_ms")
			b.ReportMetric(per(first), "create_first_ms")
			b.ReportMetric(per(createCall), "create_call_ms")
			b.ReportMetric(per(p50), "create_p50_ms")
			b.ReportMetric(per(worst), "create_max_ms")
			b.ReportMetric(float64(first)/float64(warm), "ratio_first")
			b.ReportMetric(float64(adopted)/float64(b.N), "adopted")
		})
	}
}

// waitSparesReady waits until the daemon has n ready spares.
func waitSparesReady(b *testing.B, c *httpapi.Client, n int) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		st, err := c.Pool(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		ready := 0
		for _, s := range st.Spares {
			if s.State == "ready" {
				ready++
			}
		}
		if ready >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("fewer than %d spares ready", n)
}

// e2eRepoAtB is a repository with one commit, for benchmarks.
func e2eRepoAtB(b *testing.B, dir string) string {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "init"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}
