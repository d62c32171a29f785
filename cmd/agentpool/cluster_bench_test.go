package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// BenchmarkCluster runs three built daemons on one PostgreSQL store,
// 100 sessions of the demo agent on each, every agent warm, and 100 SSE
// subscribers spread over the hosts (each reading a session of one host
// through another, so through forwarding). A round prompts all 300
// sessions at once, each turn streaming `chunks` message chunks at
// `rate` a second (300 × 20 = 6,000 events/s offered; a rate of 0 is as
// fast as the agents can), and waits for every turn to end; the
// subscribers keep their streams open until the round is over, as a page
// watching a session would. The sessions' first turn is a round of its
// own, reported apart with its figures named first_turn_* (every agent's
// first prompt, and each session's first events through the daemons);
// then each iteration is a round, the figures below their median over
// the iterations. Reported:
// events_per_s (events stored by all hosts over the iteration's wall
// time), delivery p50/p99/max (event time to its arrival at a
// subscriber), and whether every session got its turn. It also measures
// a prompt sent to the owner against one sent to another host that
// forwards it (prompt_owner_p50_ms, prompt_forwarded_p50_ms,
// forward_extra_p50_ms), and the time from the first create to every
// agent warm (create_to_all_warm_s). Run it with -benchtime 1x (or Nx
// for the median of N rounds); it needs PostgreSQL.
//
// The delivery p99 is also reported for the events of the first and the
// last half second (delivery_p99_start_ms, delivery_p99_end_ms: the turns
// starting and ending at once) and for those between. For a closer look:
// AGENTPOOL_BENCH_DUMP=FILE writes one line per event received (its time
// in µs, its delay in ms, type, session, seq), and
// AGENTPOOL_BENCH_SPREAD_MS=N sends the prompts evenly over N ms instead
// of at once, and AGENTPOOL_BENCH_ARGS adds arguments to each daemon's
// serve (e.g. "--lease-ttl 90s").
func BenchmarkCluster(b *testing.B) {
	const chunks = 100
	rate := benchEnvInt(b, "AGENTPOOL_BENCH_RATE", 20)
	perHost := benchEnvInt(b, "AGENTPOOL_BENCH_SESSIONS", 100)
	nHosts := benchEnvInt(b, "AGENTPOOL_BENCH_HOSTS", 3)
	subscribers := min(100, perHost*nHosts)
	url := startPostgres(b)
	bin := agentpoolBinary(b)
	key := clusterKeyFile(b)
	// Paced in bursts of a tenth of a second's chunks (an agent waking
	// every millisecond, as ChunksPerSecond does, would take the CPUs);
	// AGENTPOOL_BENCH_STEP_MS sets another pace.
	var steps []agenttest.Step
	stepMs := benchEnvInt(b, "AGENTPOOL_BENCH_STEP_MS", 100)
	spread := time.Duration(benchEnvInt(b, "AGENTPOOL_BENCH_SPREAD_MS", 0)) * time.Millisecond
	for sent := 0; sent < chunks; {
		n := min(max(rate*stepMs/1000, 1), chunks-sent)
		if rate == 0 {
			n = chunks
		}
		steps = append(steps, agenttest.Step{Chunks: n})
		sent += n
		if rate > 0 && sent < chunks {
			steps = append(steps, agenttest.Step{SleepMs: 1000 * n / rate})
		}
	}
	script := agenttest.Script{AgentName: "bench", Turns: []agenttest.Turn{{Steps: steps}}}
	ids := []string{"host-a", "host-b", "host-c"}[:nHosts]
	clients := map[string]*httpapi.Client{}
	for _, id := range ids {
		home := b.TempDir()
		writeScripted(b, home, bin, map[string]any{"stream": script, "quick": spareScript(0)})
		_, c, _ := startBenchDaemonEnv(b, bin, home, []string{"AGENTPOOL_STORE=" + url, "AGENTPOOL_HOST_ID=" + id, clusterKeyEnv + "=" + key},
			append([]string{"--log-level", "warn", "--max-warm", fmt.Sprint(perHost + 4)}, strings.Fields(os.Getenv("AGENTPOOL_BENCH_ARGS"))...)...)
		// A client keeps its connections, as an orchestrator sending
		// hundreds of prompts at once would (http.DefaultClient keeps
		// two per host: each burst would open hundreds).
		c.HTTP = benchHTTP
		clients[id] = c
	}
	ctx := context.Background()
	// A checkout per host: a local repository belongs to one host (git
	// does not take worktrees added by several processes at once).
	repos := map[string]string{}
	for _, h := range ids {
		repos[h] = e2eRepoAtB(b, filepath.Join(b.TempDir(), "repo"))
	}
	type sess struct{ id, host string }
	var sessions []sess
	var mu sync.Mutex
	var wg sync.WaitGroup
	createStart := time.Now()
	for _, h := range ids {
		for i := range perHost {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var created httpapi.CreatedSession
				err := clients[h].Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": repos[h], "agent": "stream", "host": h,
					"id": fmt.Sprintf("%s-%03d", h, i)}, &created)
				if err != nil {
					b.Errorf("create on %s: %v", h, err)
					return
				}
				mu.Lock()
				sessions = append(sessions, sess{created.ID, h})
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].id < sessions[j].id })
	// Every agent warm before the clock starts.
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		warm := 0
		for _, h := range ids {
			st, err := clients[h].Pool(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for _, be := range st.Backends {
				if be.State == pool.StateIdle {
					warm++
				}
			}
		}
		if warm >= len(sessions) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d agents warm after 5 minutes", warm, len(sessions))
		}
	}

	allWarm := time.Since(createStart)

	// Forwarded prompt against a prompt to the owner, on an idle session
	// of the quick agent on each host.
	var direct, forwarded []time.Duration
	for hi, h := range ids {
		var created httpapi.CreatedSession
		if err := clients[h].Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": repos[h], "agent": "quick", "host": h}, &created); err != nil {
			b.Fatal(err)
		}
		other := ids[(hi+1)%len(ids)]
		for i := range 30 {
			via := h
			if i%2 == 1 {
				via = other
			}
			start := time.Now()
			if _, err := clients[via].Prompt(ctx, created.ID, "", "warm", false); err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			waitIdle(b, clients[h], created.ID)
			if i < 2 {
				continue // the agent's first turns
			}
			if via == h {
				direct = append(direct, d)
			} else {
				forwarded = append(forwarded, d)
			}
		}
	}
	var dp, fp time.Duration
	if len(forwarded) > 0 {
		dp, fp = median(direct), median(forwarded)
	}

	// round prompts every session once while the subscribers read, and
	// notes its figures, their names prefixed with prefix; timed says
	// whether the benchmark's clock runs through it. Each figure is
	// reported as the median of the rounds.
	figures := map[string][]float64{}
	var names []string
	round := func(prefix string, timed bool) {
		if timed {
			b.StopTimer() // the subscribers' set-up is not the round's
		}
		report := func(v float64, unit string) {
			if figures[prefix+unit] == nil {
				names = append(names, prefix+unit)
			}
			figures[prefix+unit] = append(figures[prefix+unit], v)
		}
		// Subscribers: session i of the first 100, read through the
		// next host, from its current end.
		var lat []delivered
		var latMu sync.Mutex
		var dumpF *os.File
		var dumpMu sync.Mutex
		if p := os.Getenv("AGENTPOOL_BENCH_DUMP"); p != "" {
			dumpF, _ = os.Create(p)
		}
		var got atomic.Int64
		sctx, cancel := context.WithCancel(ctx)
		// subs ends with the subscribers, ended once each has had its
		// turn's end.
		var subs, ended sync.WaitGroup
		for i := range subscribers {
			s := sessions[i*len(sessions)/subscribers]
			via := clients[ids[(indexOf(ids, s.host)+1)%len(ids)]]
			if direct := os.Getenv("AGENTPOOL_BENCH_DIRECT") != ""; direct {
				via = clients[s.host] // the owner's own stream, for comparison
			}
			evs, err := clients[s.host].EventLog(ctx, s.id, 0)
			if err != nil {
				b.Fatal(err)
			}
			from := evs[len(evs)-1].Seq
			subs.Add(1)
			ended.Add(1)
			go func() {
				defer subs.Done()
				var once sync.Once
				end := func() { once.Do(ended.Done) }
				defer end()
				var mine []delivered
				_ = via.Events(sctx, s.id, from, func(ev backends.Event) error {
					d := delivered{at: ev.Time, after: time.Since(ev.Time)}
					mine = append(mine, d)
					if dumpF != nil {
						dumpMu.Lock()
						fmt.Fprintf(dumpF, "%d %.3f %s %s %d\n", ev.Time.UnixMicro(), ms(d.after), ev.Type, s.id, ev.Seq)
						dumpMu.Unlock()
					}
					got.Add(1)
					if ev.Type == backends.EventTurnEnded {
						// The stream stays open, as a page watching
						// the session keeps it: the round's streams
						// end together once it is over.
						end()
					}
					return nil
				})
				latMu.Lock()
				lat = append(lat, mine...)
				latMu.Unlock()
			}()
		}
		time.Sleep(500 * time.Millisecond)
		before := 0
		for _, s := range sessions {
			evs, _ := clients[s.host].EventLog(ctx, s.id, 0)
			before += len(evs)
		}
		if timed {
			b.StartTimer()
		}
		start := time.Now()
		var pw sync.WaitGroup
		var failed atomic.Int64
		for i, s := range sessions {
			pw.Add(1)
			go func() {
				defer pw.Done()
				if spread > 0 {
					// Evenly over the spread, in an order that mixes hosts.
					time.Sleep(time.Duration((i*7919)%len(sessions)) * spread / time.Duration(len(sessions)))
				}
				t, err := clients[s.host].Prompt(ctx, s.id, "", "go", true)
				if err != nil || t.StopReason != "end_turn" {
					failed.Add(1)
				}
			}()
		}
		pw.Wait()
		wall := time.Since(start)
		if timed {
			b.StopTimer()
		}
		// Every subscriber has had its turn's end, or stops waiting for
		// it a while after the prompts have all been answered (a turn
		// that did not end counts against sessions_with_turn, and its
		// events are missing from events_subscribed).
		allEnded := make(chan struct{})
		go func() { ended.Wait(); close(allEnded) }()
		select {
		case <-allEnded:
		case <-time.After(30 * time.Second):
			b.Errorf("some subscribers had no turn.ended 30 s after every prompt was answered")
		}
		cancel()
		subs.Wait()
		after := 0
		for _, s := range sessions {
			evs, _ := clients[s.host].EventLog(ctx, s.id, 0)
			after += len(evs)
		}
		report(float64(after-before)/wall.Seconds(), "events_per_s")
		report(float64(len(sessions)-int(failed.Load())), "sessions_with_turn")
		if dumpF != nil {
			dumpF.Close()
		}
		if len(lat) > 0 {
			var all, first, last, between []time.Duration
			for _, d := range lat {
				all = append(all, d.after)
				switch {
				case d.at.Before(start.Add(500 * time.Millisecond)):
					first = append(first, d.after)
				case d.at.After(start.Add(wall - 500*time.Millisecond)):
					last = append(last, d.after)
				default:
					between = append(between, d.after)
				}
			}
			report(ms(quantile(all, 0.5)), "delivery_p50_ms")
			report(ms(quantile(all, 0.99)), "delivery_p99_ms")
			report(ms(quantile(all, 1)), "delivery_max_ms")
			report(ms(quantile(first, 0.99)), "delivery_p99_start_ms")
			report(ms(quantile(between, 0.99)), "delivery_p99_between_ms")
			report(ms(quantile(last, 0.99)), "delivery_p99_end_ms")
		}
		report(float64(got.Load()), "events_subscribed")
	}
	// The sessions' first turn is every agent's first prompt, and the
	// first events of each session through the daemons (a process's
	// first allocations, its first JSON of each kind, the session's
	// prompt keys read once): reported apart, as first_turn_*. The
	// figures without a prefix are those of the turns after it.
	round("first_turn_", false)
	b.ResetTimer()
	for range b.N {
		round("", true)
	}
	for _, name := range names {
		v := figures[name]
		slices.Sort(v)
		b.ReportMetric(v[len(v)/2], name)
	}
	b.ReportMetric(allWarm.Seconds(), "create_to_all_warm_s")
	if fp > 0 {
		b.ReportMetric(ms(dp), "prompt_owner_p50_ms")
		b.ReportMetric(ms(fp), "prompt_forwarded_p50_ms")
		b.ReportMetric(ms(fp-dp), "forward_extra_p50_ms")
	}
}

// delivered is an event received by a subscriber: its time, and how long
// after it the subscriber had it.
type delivered struct {
	at    time.Time
	after time.Duration
}

// quantile returns the q quantile of ds (sorting it), 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[min(int(float64(len(ds))*q), len(ds)-1)]
}

// benchHTTP is the benchmark client's HTTP client.
var benchHTTP = &http.Client{Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}}

// benchEnvInt reads an integer setting of a benchmark from the
// environment, def when unset.
func benchEnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// waitIdle waits until session runs no turn.
func waitIdle(b *testing.B, c *httpapi.Client, session string) {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		s, err := c.Session(context.Background(), session)
		if err == nil && !s.Busy {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("session %s still busy: %v", session, err)
		}
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
