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

// firstToken prompts session and returns the time from start to the
// first message chunk of that prompt's turn on the session's stream.
func firstToken(ctx context.Context, c *httpapi.Client, session string, start time.Time) (time.Duration, error) {
	return awaitFirstToken(ctx, c, session, start, 0)
}

// awaitFirstToken is firstToken for turn when it is set (a session
// created with its first prompt has its turn started already), else for
// the turn of a prompt it sends once subscribed. Chunks of earlier turns,
// replayed to the new subscriber, do not count.
func awaitFirstToken(ctx context.Context, c *httpapi.Client, session string, start time.Time, turn int64) (time.Duration, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	seen := map[int64]time.Duration{} // turn → its first chunk's arrival
	want := turn
	arrived := make(chan struct{}, 1)
	subscribed := make(chan struct{})
	done := make(chan error, 1)
	var once sync.Once
	go func() {
		done <- c.Events(sctx, session, 0, func(ev backends.Event) error {
			once.Do(func() { close(subscribed) })
			if ev.Type != backends.EventMessageChunk || ev.Turn == 0 {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if _, ok := seen[ev.Turn]; !ok {
				seen[ev.Turn] = time.Since(start)
			}
			if want != 0 && ev.Turn == want {
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
	if turn == 0 {
		t, err := c.Prompt(sctx, session, "", "go", false)
		if err != nil {
			return 0, err
		}
		mu.Lock()
		want = t.ID
		_, ok := seen[want]
		mu.Unlock()
		if ok {
			arrived <- struct{}{}
		}
	}
	select {
	case err := <-done:
		if !errors.Is(err, errFirstToken) {
			return 0, fmt.Errorf("no first token: %w", err)
		}
	case <-arrived:
	}
	mu.Lock()
	defer mu.Unlock()
	return seen[want], nil
}

// BenchmarkSpares measures, with the demo agent slowed to a 1.5 s start,
// the time from POST /v1/sessions to the first token of the session's
// first prompt when spares are kept (2 per repository), against a warm
// prompt's first token in the same run, for 1, 10 and 50 sessions
// created at once: the first two adopt spares, the others start their
// agent. Reported: warm_ms, the median and the slowest create→first
// token (create_p50_ms, create_max_ms), the fastest's POST /v1/sessions
// alone, to its answer (create_call_ms), how many sessions adopted a
// spare, and ratio_first = the first session's time over the warm
// prompt's of the same iteration (warm_ms: a prompt after the session sat
// idle for idleBefore, as the create comes after the daemon did), and
// ratio_hot the same over a warm prompt sent right after another turn
// (warm_hot_ms); each figure is the median over the iterations (the warm
// prompt's of an iteration, the median of five, each measured as a
// client would: subscribe, prompt, first token). The
// modes: create,prompt creates the session, then subscribes and prompts
// it; create+prompt,events creates it with its first prompt, then
// subscribes; create+prompt+events creates it with its first prompt and
// reads its stream in the answer, one request. Run it with -benchtime 7x.
func BenchmarkSpares(b *testing.B) {
	sizes := []int{1, 10, 50}
	if testing.Short() {
		sizes = sizes[:2] // make bench-smoke
	}
	for _, n := range sizes {
		for _, mode := range []string{modeTwoCalls, modePromptInCreate, modeStreamed} {
			b.Run(fmt.Sprintf("sessions=%d/%s", n, mode), func(b *testing.B) { benchSpares(b, n, mode) })
		}
	}
}

// How BenchmarkSpares creates a session and prompts it.
const (
	// modeTwoCalls: POST /v1/sessions, then GET …/events and POST …/prompt.
	modeTwoCalls = "create,prompt"
	// modePromptInCreate: POST /v1/sessions with "prompt", then GET …/events.
	modePromptInCreate = "create+prompt,events"
	// modeStreamed: POST /v1/sessions with "prompt" answered as the
	// session's event stream (httpapi.Client.CreateStream): one request.
	modeStreamed = "create+prompt+events"
)

// createStreamed creates a session with its first prompt and its event
// stream in one request and returns the time from start to the first
// token of that prompt's turn, and the time the answer came.
func createStreamed(ctx context.Context, c *httpapi.Client, req pool.CreateRequest, start time.Time) (id string, call, first time.Duration, err error) {
	var turn int64
	cs, err := c.CreateStream(ctx, httpapi.CreateSessionRequest{CreateRequest: req, Prompt: "go"},
		func(cs httpapi.CreatedSession) error {
			call = time.Since(start)
			if cs.FirstTurnError != nil {
				return cs.FirstTurnError
			}
			turn = cs.FirstTurn.ID
			return nil
		},
		func(ev backends.Event) error {
			if ev.Type == backends.EventMessageChunk && ev.Turn == turn {
				first = time.Since(start)
				return httpapi.ErrStop
			}
			return nil
		})
	if err == nil && first == 0 {
		err = errors.New("the stream ended before the first token")
	}
	return cs.ID, call, first, err
}

// idleBefore is how long BenchmarkSpares lets the daemon and the agents
// sit idle before a measured prompt or create.
const idleBefore = time.Second

// benchSpares is one case of BenchmarkSpares.
func benchSpares(b *testing.B, n int, mode string) {
	repo := e2eRepoAtB(b, filepath.Join(b.TempDir(), "repo"))
	c := benchDaemon(b, []string{"--max-warm", "64", "--spares", "slow=2", "--spares-repo", repo},
		"AGENTPOOL_WORKTREES="+filepath.Join(b.TempDir(), "trees"))
	ctx := context.Background()
	var warm, warmHot, first, p50, worst, createCall []time.Duration
	var ratios, ratiosHot []float64
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
		waitSparesReady(b, c, 2)
		// Its figures are medians of a few prompts, as noisy as the
		// creates they are compared with: five back to back (hot), and
		// five each after the daemon and the agent sat idle for
		// idleBefore, as a spare's agent sits until it is adopted and a
		// session's agent until its user's next prompt.
		var hot5, idle5 []time.Duration
		for k := range 10 {
			if k >= 5 {
				time.Sleep(idleBefore)
			}
			w, err := firstToken(ctx, c, ws.ID, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			if k < 5 {
				hot5 = append(hot5, w)
			} else {
				idle5 = append(idle5, w)
			}
			// The next prompt waits for this turn's end: a prompt to a
			// busy session is refused.
			waitIdle(b, c, ws.ID) // cluster_bench_test.go
		}
		warm = append(warm, median(idle5))
		warmHot = append(warmHot, median(hot5))
		time.Sleep(idleBefore)
		b.StartTimer()
		times := make([]time.Duration, n)
		callTimes := make([]time.Duration, n)
		ids := make([]string, n)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for j := 0; j < n; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				var id string
				var firstTurn int64 // 0: awaitFirstToken prompts
				if mode == modeStreamed {
					id, call, d, err := createStreamed(ctx, c, pool.CreateRequest{Repo: repo, Agent: "slow"}, start)
					ids[j] = id
					if err != nil {
						errs <- err
						return
					}
					callTimes[j], times[j] = call, d
					return
				}
				if mode == modePromptInCreate {
					s, err := c.CreateSessionPrompt(ctx, pool.CreateRequest{Repo: repo, Agent: "slow"}, "go")
					if err == nil && s.FirstTurnError != nil {
						err = s.FirstTurnError
					}
					if err != nil {
						errs <- err
						return
					}
					id, firstTurn = s.ID, s.FirstTurn.ID
				} else {
					s, err := c.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "slow"})
					if err != nil {
						errs <- err
						return
					}
					id = s.ID
				}
				ids[j] = id
				callTimes[j] = time.Since(start)
				d, err := awaitFirstToken(ctx, c, id, start, firstTurn)
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
		createCall = append(createCall, callTimes[fastest])
		first = append(first, sorted[0])
		p50 = append(p50, sorted[len(sorted)/2])
		worst = append(worst, sorted[len(sorted)-1])
		ratios = append(ratios, float64(sorted[0])/float64(warm[len(warm)-1]))
		ratiosHot = append(ratiosHot, float64(sorted[0])/float64(warmHot[len(warmHot)-1]))
		for _, id := range append(ids, ws.ID) {
			_, _ = c.CloseSession(ctx, id, true)
		}
		b.StartTimer()
	}
	ms := func(d []time.Duration) float64 { return float64(median(d).Microseconds()) / 1000 }
	b.ReportMetric(ms(warm), "warm_ms")
	b.ReportMetric(ms(warmHot), "warm_hot_ms")
	b.ReportMetric(ms(first), "create_first_ms")
	b.ReportMetric(ms(createCall), "create_call_ms")
	b.ReportMetric(ms(p50), "create_p50_ms")
	b.ReportMetric(ms(worst), "create_max_ms")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "ratio_first")
	slices.Sort(ratiosHot)
	b.ReportMetric(ratiosHot[len(ratiosHot)/2], "ratio_hot")
	b.ReportMetric(float64(adopted)/float64(b.N), "adopted")
}

// median is the middle of d (the upper one of an even count).
func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
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
