package pool_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// The benchmarks of issue 6. They run the pool built by newEnv from real
// parts (SQLite file, git worktrees, registry, the scripted fake agent
// re-executed from the test binary), so every figure includes git
// checkpoints, SQLite writes and a real process boundary. Run them without
// -race; see each benchmark for the command.

// benchQuiet silences the pool's log (hundreds of "stopping agent" lines).
func benchQuiet(c *pool.Config) { c.Logger = slog.New(slog.DiscardHandler) }

// benchSilence discards the default logger's output (the registry, the
// worktrees and the backends of newEnv log there) until the benchmark ends,
// so that nothing splits the result lines that benchstat reads.
func benchSilence(b *testing.B) {
	prev, w, flags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.DiscardHandler))
	b.Cleanup(func() {
		slog.SetDefault(prev)
		log.SetOutput(w)
		log.SetFlags(flags)
	})
}

// quantile returns the q-quantile (0 < q ≤ 1) of sorted, nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(sorted))*q)) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportLatency sorts lat and reports its p50 and p99 in milliseconds.
func reportLatency(b *testing.B, prefix string, lat []time.Duration) (p50, p99 time.Duration) {
	b.Helper()
	slices.Sort(lat)
	p50, p99 = quantile(lat, 0.50), quantile(lat, 0.99)
	b.ReportMetric(ms(p50), prefix+"p50-ms")
	b.ReportMetric(ms(p99), prefix+"p99-ms")
	return p50, p99
}

// timedPrompt runs one turn, checks that it ended normally and returns it
// with the moments Prompt was called and returned.
func timedPrompt(b *testing.B, e *env, session, agent, text string) promptRun {
	b.Helper()
	start := time.Now()
	tn := e.prompt(session, agent, text)
	end := time.Now()
	if tn.StopReason != string(backends.StopEndTurn) || tn.Error != "" || tn.EndedAt == nil {
		b.Fatalf("Prompt(%s, %q) = %+v; want end_turn without error", session, agent, tn)
	}
	return promptRun{start: start, end: end, turn: tn}
}

// promptRun is one timed prompt.
type promptRun struct {
	start, end time.Time
	turn       pool.Turn
}

func (r promptRun) took() time.Duration { return r.end.Sub(r.start) }

func tookAll(runs []promptRun) []time.Duration {
	out := make([]time.Duration, len(runs))
	for i, r := range runs {
		out[i] = r.took()
	}
	return out
}

// reportPhases splits the latency of runs (turns of session that each
// stream one chunk) with the turn's own times and its events, and reports
// the p50 and p99 of each part:
//
//	pre:   Prompt called → Turn.StartedAt (acquire, switch, checkpoint before)
//	agent: turn.started → the chunk decoded (the ACP round trip to the agent)
//	post:  the chunk → Turn.EndedAt (prompt answer, checkpoint after)
//	rows:  storing the turn row at its start and its end, with the two events
func reportPhases(b *testing.B, e *env, session, prefix string, runs []promptRun) {
	b.Helper()
	type marks struct{ started, chunk, ended time.Time }
	byTurn := map[int64]*marks{}
	for _, ev := range e.events(session) {
		m := byTurn[ev.Turn]
		if m == nil {
			m = &marks{}
			byTurn[ev.Turn] = m
		}
		switch ev.Type {
		case backends.EventTurnStarted:
			m.started = ev.Time
		case backends.EventMessageChunk:
			m.chunk = ev.Time
		case backends.EventTurnEnded:
			m.ended = ev.Time
		}
	}
	var pre, agent, post, rows []time.Duration
	for _, r := range runs {
		m := byTurn[r.turn.ID]
		if m == nil || m.started.IsZero() || m.chunk.IsZero() || m.ended.IsZero() {
			b.Fatalf("turn %d: events %+v; want turn.started, message.chunk and turn.ended", r.turn.ID, m)
		}
		pre = append(pre, r.turn.StartedAt.Sub(r.start))
		agent = append(agent, m.chunk.Sub(m.started))
		post = append(post, r.turn.EndedAt.Sub(m.chunk))
		rows = append(rows, m.started.Sub(r.turn.StartedAt)+m.ended.Sub(*r.turn.EndedAt))
	}
	for _, ph := range []struct {
		name string
		d    []time.Duration
	}{{"pre", pre}, {"agent", agent}, {"post", post}, {"rows", rows}} {
		slices.Sort(ph.d)
		b.ReportMetric(ms(quantile(ph.d, 0.5)), prefix+ph.name+"-p50-ms")
		b.ReportMetric(ms(quantile(ph.d, 0.99)), prefix+ph.name+"-p99-ms")
	}
}

// BenchmarkPromptWarmVsCold compares a prompt on a warm backend with one
// that must first start the agent (spawn, initialize, session/new) in the
// same session. The agent answers with one chunk. The cold sub-benchmark
// also times a prompt on another pool's warm backend right after each cold
// one, so both medians come from the same moments of a noisy machine, and
// reports their ratio (cold/warm); and the second prompt of each freshly
// started backend (fresh-, cold/fresh).
//
//	go test -run '^$' -bench PromptWarmVsCold -benchtime 100x -count 3 ./pool/
func BenchmarkPromptWarmVsCold(b *testing.B) {
	benchSilence(b)
	providers := map[string]any{"fake": providerEntry(agenttest.Script{})}
	b.Run("warm", func(b *testing.B) {
		e := newEnv(b, providers, benchQuiet)
		s := e.session("fake")
		timedPrompt(b, e, s.ID, "", "warm up")
		runs := make([]promptRun, 0, b.N)
		b.ResetTimer()
		for range b.N {
			runs = append(runs, timedPrompt(b, e, s.ID, "", "hello"))
		}
		b.StopTimer()
		if n := e.p.Stats().Spawns; n != 1 {
			b.Fatalf("spawns = %d after %d warm prompts; want 1", n, b.N)
		}
		reportLatency(b, "", tookAll(runs))
		reportPhases(b, e, s.ID, "", runs)
	})
	b.Run("cold", func(b *testing.B) {
		// Run never runs here, so only the explicit ReapIdle stops backends;
		// with this timeout it stops every idle one. The warm baseline is a
		// second pool whose backend stays warm, prompted right after each
		// cold prompt so that both see the same moments of the machine.
		e := newEnv(b, providers, func(c *pool.Config) { benchQuiet(c); c.IdleTimeout = time.Nanosecond })
		// Without the warm-up Create starts by default: its spawn would
		// count as one more than the cold prompts'.
		noWarm := false
		s, err := e.p.Create(context.Background(), pool.CreateRequest{Repo: e.repo, Agent: "fake", Warm: &noWarm})
		if err != nil {
			b.Fatalf("Create: %v", err)
		}
		w := newEnv(b, providers, benchQuiet)
		ws := w.session("fake")
		timedPrompt(b, w, ws.ID, "", "warm up")
		cold := make([]time.Duration, 0, b.N)
		warm := make([]promptRun, 0, b.N)
		fresh := make([]promptRun, 0, b.N)
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			e.p.ReapIdle()
			waitUntil(b, "backend stopped", func() bool { return len(e.p.Backends()) == 0 })
			b.StartTimer()
			cold = append(cold, timedPrompt(b, e, s.ID, "", "hello").took())
			b.StopTimer()
			warm = append(warm, timedPrompt(b, w, ws.ID, "", "hello"))
			fresh = append(fresh, timedPrompt(b, e, s.ID, "", "again"))
			b.StartTimer()
		}
		b.StopTimer()
		if n := e.p.Stats().Spawns; n != int64(b.N) {
			b.Fatalf("spawns = %d after %d cold prompts; want one each", n, b.N)
		}
		if n := w.p.Stats().Spawns; n != 1 {
			b.Fatalf("warm pool: spawns = %d; want 1", n)
		}
		c50, _ := reportLatency(b, "cold-", cold)
		w50, _ := reportLatency(b, "warm-", tookAll(warm))
		reportPhases(b, w, ws.ID, "warm-", warm)
		b.ReportMetric(float64(c50)/float64(w50), "cold/warm")
		// The second prompt of a backend just started is slower than a
		// prompt on one warm for a while (the agent's own first paths).
		f50, _ := reportLatency(b, "fresh-", tookAll(fresh))
		b.ReportMetric(float64(c50)/float64(f50), "cold/fresh")
		// The start alone: agent.starting → agent.ready (spawn, initialize, session/new).
		var starts []time.Duration
		var starting time.Time
		for _, ev := range e.events(s.ID) {
			switch ev.Type {
			case backends.EventAgentStarting:
				starting = ev.Time
			case backends.EventAgentReady:
				starts = append(starts, ev.Time.Sub(starting))
			}
		}
		if len(starts) != b.N {
			b.Fatalf("%d agent.ready events; want %d", len(starts), b.N)
		}
		slices.Sort(starts)
		b.ReportMetric(ms(quantile(starts, 0.5)), "start-p50-ms")
	})
}

// BenchmarkSwitchBack alternates prompts between the two warm agents of one
// session: every prompt switches the session back to the other agent, which
// has stayed warm. One op is one such prompt.
//
//	go test -run '^$' -bench SwitchBack -benchtime 200x -count 3 ./pool/
func BenchmarkSwitchBack(b *testing.B) {
	benchSilence(b)
	e := newEnv(b, map[string]any{"a": providerEntry(agenttest.Script{}), "b": providerEntry(agenttest.Script{})}, benchQuiet)
	s := e.session("a")
	timedPrompt(b, e, s.ID, "a", "warm a")
	timedPrompt(b, e, s.ID, "b", "warm b")
	agents := [2]string{"a", "b"}
	runs := make([]promptRun, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		runs = append(runs, timedPrompt(b, e, s.ID, agents[i%2], "switch"))
	}
	b.StopTimer()
	if n := e.p.Stats().Spawns; n != 2 {
		b.Fatalf("spawns = %d; want 2 (each agent once, then only switches)", n)
	}
	if got, err := e.p.Get(context.Background(), s.ID); err != nil || got.ActiveAgent != agents[(b.N-1)%2] {
		b.Fatalf("Get(%s) = active %q, %v; want %q", s.ID, got.ActiveAgent, err, agents[(b.N-1)%2])
	}
	reportLatency(b, "", tookAll(runs))
	reportPhases(b, e, s.ID, "", runs)
}

// memSample is the daemon's (this process's) footprint at one moment.
type memSample struct {
	heapInuse  uint64
	rss        int64
	goroutines int
}

// sampleMem collects garbage, returns freed memory to the OS, and reads the
// live heap, the resident set and the goroutine count.
func sampleMem(b *testing.B) memSample {
	b.Helper()
	debug.FreeOSMemory()
	var mst runtime.MemStats
	runtime.ReadMemStats(&mst)
	return memSample{heapInuse: mst.HeapInuse, rss: selfRSS(b), goroutines: runtime.NumGoroutine()}
}

// selfRSS reads VmRSS from /proc/self/status, in bytes.
func selfRSS(b *testing.B) int64 {
	b.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatalf("open /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("parse VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no VmRSS in /proc/self/status (err %v)", sc.Err())
	return 0
}

// BenchmarkWarmBackends200 measures what warm backends cost the daemon: n
// sessions with one warm fake agent each. It reports, per backend, the
// growth of the heap in use (after GC), of the resident set and of the
// goroutine count between "n sessions open, no agent" and "n agents warm",
// and the same per session for opening the sessions themselves. The n=50
// and n=100 runs show whether the cost is linear. Each sub-benchmark does
// its work once, whatever b.N.
//
//	go test -run '^$' -bench 'WarmBackends200' -benchtime 1x -count 1 -timeout 20m ./pool/
func BenchmarkWarmBackends200(b *testing.B) {
	sizes := []int{50, 100, 200}
	if testing.Short() {
		sizes = []int{10} // make bench-smoke: not hundreds of agent processes
	}
	benchSilence(b)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchWarmBackends(b, n) })
	}
}

func benchWarmBackends(b *testing.B, n int) {
	const parallel = 8 // starts in flight; more only queues on 2 cores
	e := newEnv(b, map[string]any{"fake": providerEntry(agenttest.Script{})}, func(c *pool.Config) {
		benchQuiet(c)
		c.MaxWarm = n
		c.MemoryBudget = -1
	})
	ctx := context.Background()
	base := sampleMem(b)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.session("fake").ID
	}
	opened := sampleMem(b)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	errs := make(chan error, n)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := e.p.Warm(ctx, id, "fake"); err != nil {
				errs <- fmt.Errorf("Warm(%s): %w", id, err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	warm := sampleMem(b)
	var agentRSS int64
	rss := backends.GroupRSS()
	idle := 0
	for _, st := range e.p.Backends() {
		if st.State == pool.StateIdle && backends.GroupAlive(st.PID) {
			idle++
			agentRSS += rss[st.PID]
		}
	}
	if idle != n || e.p.Stats().Spawns != int64(n) {
		b.Fatalf("%d idle live backends, %d spawns; want %d of each", idle, e.p.Stats().Spawns, n)
	}
	per := func(after, before int64) float64 { return float64(after-before) / float64(n) }
	b.ReportMetric(per(int64(warm.heapInuse), int64(opened.heapInuse))/1024, "heap-KiB/backend")
	b.ReportMetric(per(warm.rss, opened.rss)/1024, "rss-KiB/backend")
	b.ReportMetric(per(int64(warm.goroutines), int64(opened.goroutines)), "goroutines/backend")
	b.ReportMetric(per(int64(opened.heapInuse), int64(base.heapInuse))/1024, "heap-KiB/session")
	b.ReportMetric(per(opened.rss, base.rss)/1024, "rss-KiB/session")
	b.ReportMetric(float64(agentRSS)/float64(n)/(1<<20), "agent-MiB/backend")
	b.ReportMetric(elapsed.Seconds(), "warm-all-s")
}

// BenchmarkEventAppend100Subscribers streams one turn of many small chunks
// into a session that 100 subscribers read concurrently, each taking what
// is available in one Next. One op is one such turn. It reports the events
// per second seen end to end (prompt sent → every subscriber has the
// turn's end), the delivery latency from an event's Time (set when the
// backend decoded the agent's update) to the moment a subscriber received
// the batch holding it, the store's rate (the turn's events written to
// SQLite, Flush included) and how many times per turn a subscriber fell
// behind the session's ring and read the store. 0 and 1 subscribers give
// the pipeline alone and delivery without fan-out. The latency is over the
// last turn's deliveries.
//
// With rate=max the agent sends as fast as it can; with 100 subscribers
// that is more than the pipeline takes (about 110 000 events/s on two
// cores), so the latency there is mostly the queue that builds up before
// the pool and how the two cores are shared between
// the agent, the pool and SQLite; rate=20000 offers the goal's throughput,
// 20 000 events/s, and shows the delivery latency at that load; 40000 and
// 60000 show it at two and three times the goal.
//
//	go test -run '^$' -bench EventAppend100Subscribers -benchtime 3x -count 3 ./pool/
func BenchmarkEventAppend100Subscribers(b *testing.B) {
	benchSilence(b)
	for _, c := range []struct{ subs, rate int }{{0, 0}, {1, 0}, {100, 0}, {100, 20000}, {100, 40000}, {100, 60000}} {
		rate := "max"
		if c.rate > 0 {
			rate = fmt.Sprint(c.rate)
		}
		b.Run(fmt.Sprintf("subs=%d/rate=%s", c.subs, rate), func(b *testing.B) { benchEventFanout(b, c.subs, c.rate) })
	}
}

func benchEventFanout(b *testing.B, subs, rate int) {
	const chunks = 20000
	flood := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: chunks, ChunksPerSecond: rate}}}}}
	e := newEnv(b, map[string]any{"fake": providerEntry(flood)}, benchQuiet)
	s := e.session("fake")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := e.p.Warm(ctx, s.ID, "fake"); err != nil {
		b.Fatalf("Warm: %v", err)
	}
	lat := make([][]time.Duration, subs)
	for i := range lat {
		lat[i] = make([]time.Duration, 0, chunks+16)
	}
	var events, catchups int64
	var total, storeTotal time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		cur, err := e.p.Get(ctx, s.ID)
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		got := make([]int64, subs)
		ended := make([]error, subs)
		for i := range subs {
			sub, err := e.p.Subscribe(ctx, s.ID, cur.LastSeq)
			if err != nil {
				b.Fatalf("Subscribe(%s, %d): %v", s.ID, cur.LastSeq, err)
			}
			lat[i] = lat[i][:0]
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer sub.Close()
				for {
					evs, err := sub.Next(ctx, 0)
					if err != nil {
						ended[i] = err
						return
					}
					now := time.Now()
					for _, ev := range evs {
						lat[i] = append(lat[i], now.Sub(ev.Time))
						got[i]++
						if ev.Type == backends.EventTurnEnded {
							return
						}
					}
				}
			}()
		}
		// Earlier events (the agent's start) must not count as this turn's.
		if err := e.st.Flush(ctx); err != nil {
			b.Fatalf("store Flush: %v", err)
		}
		before, pool0 := e.st.Stats(), e.p.Stats()
		b.StartTimer()
		start := time.Now()
		tn := e.prompt(s.ID, "", "flood")
		wg.Wait()
		total += time.Since(start)
		if err := e.st.Flush(ctx); err != nil {
			b.Fatalf("store Flush: %v", err)
		}
		storeTotal += time.Since(start)
		b.StopTimer()
		if tn.StopReason != string(backends.StopEndTurn) {
			b.Fatalf("turn = %+v; want end_turn", tn)
		}
		after, pool1 := e.st.Stats(), e.p.Stats()
		turnEvents := pool1.EventsPublished - pool0.EventsPublished
		if w := after.Appended - before.Appended; turnEvents < chunks+2 || w != turnEvents || after.Dropped != before.Dropped || after.Rejected != before.Rejected {
			b.Fatalf("store wrote %d events (dropped %d, rejected %d) of the %d published for a turn of %d chunks", w,
				after.Dropped-before.Dropped, after.Rejected-before.Rejected, turnEvents, chunks)
		}
		for i, err := range ended {
			if err != nil || got[i] != turnEvents {
				b.Fatalf("subscriber %d got %d events, then %v; want all %d of the turn", i, got[i], err, turnEvents)
			}
		}
		if d := pool1.SubscribersDrop - pool0.SubscribersDrop; d != 0 {
			b.Fatalf("pool dropped %d subscribers; want none", d)
		}
		catchups += pool1.SubscriberCatchups - pool0.SubscriberCatchups
		events += turnEvents
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(events)/total.Seconds(), "events/s")
	b.ReportMetric(float64(events)/storeTotal.Seconds(), "store-events/s")
	if subs == 0 {
		return
	}
	var all []time.Duration
	for _, l := range lat { // the last turn's deliveries
		all = append(all, l...)
	}
	b.ReportMetric(float64(catchups)/float64(b.N), "catchups/op")
	reportLatency(b, "delivery-", all)
}
