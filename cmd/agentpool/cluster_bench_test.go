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
// through another, so through forwarding), each turn streaming `chunks`
// message chunks at `rate` a second (300 × 20 = 6,000 events/s offered;
// a rate of 0 is as fast as the agents can). The subscribers keep their
// streams open until the round is over, as a page watching a session
// would.
//
// It runs two kinds of round. A steady round keeps every session in
// turns, each prompt sent as the last one's answer comes, the sessions'
// first prompts spread evenly over one turn's length (as many users and
// orchestrators prompting independently do): its figures, without a
// prefix, are those of its steady window, from one turn's length after
// the round's start to AGENTPOOL_BENCH_STEADY_S (10) seconds later, no
// session starting a turn after it. A burst round prompts all 300
// sessions at once and waits for every turn to end: the 300 turns start
// and end together. The sessions' first turn is a burst round of its
// own, reported as first_turn_* (every agent's first prompt, and each
// session's first events through the daemons); then each iteration is a
// burst round (burst_*) and a steady round, each figure the median over
// the iterations. Reported: events_per_s (events stored by all hosts
// over the steady window, or over a burst round's wall time), delivery
// p50/p99/max (event time to its arrival at a subscriber, for the events
// of the window), turns, and how many sessions had every turn end
// normally (sessions_with_turn). It also measures a prompt sent to the
// owner against one sent to another host that forwards it
// (prompt_owner_p50_ms, prompt_forwarded_p50_ms, forward_extra_p50_ms),
// and the time from the first create to every agent warm
// (create_to_all_warm_s). Run it with -benchtime 1x (or Nx for the
// median of N iterations); it needs PostgreSQL.
//
// Last, with the rounds over, it measures fairness on the first host as
// BenchmarkFairness does (see clusterFairness): three bystander sessions
// prompting back to back, alone and then while another session of the
// host floods 100,000 small updates, then 100 of 1 MiB; reported as
// bystander_<phase>_p50_ms, _p99_ms and _p50/base.
//
// A burst round also reports its delivery p99 for the events of its
// first and last half second (delivery_p99_start_ms,
// delivery_p99_end_ms: the turns starting and ending at once) and for
// those between. For a closer look: AGENTPOOL_BENCH_DUMP=FILE writes one
// line per event a subscriber received in the last round (its time in
// µs, its delay in ms, type, session, seq),
// AGENTPOOL_BENCH_SPREAD_MS=N sends a burst round's prompts evenly over
// N ms instead of at once, and AGENTPOOL_BENCH_ARGS adds arguments to
// each daemon's serve (e.g. "--lease-ttl 90s").
func BenchmarkCluster(b *testing.B) {
	const chunks = 100
	rate := benchEnvInt(b, "AGENTPOOL_BENCH_RATE", 20)
	defSessions, steady := 100, 10
	if testing.Short() {
		defSessions, steady = 10, 2 // make bench-smoke: the same path, small
	}
	perHost := benchEnvInt(b, "AGENTPOOL_BENCH_SESSIONS", defSessions)
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
	steadyS := time.Duration(benchEnvInt(b, "AGENTPOOL_BENCH_STEADY_S", steady)) * time.Second
	// A turn's length: its chunks at rate a second (as fast as the
	// agents can: a steady round then starts its sessions together).
	var turnLen time.Duration
	if rate > 0 {
		turnLen = time.Duration(chunks) * time.Second / time.Duration(rate)
	}
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
	// The fairness phase's floods (see BenchmarkFairness).
	fl := fairnessLoad{chunks: 100_000, big: 100, baseline: 3 * time.Second}
	if testing.Short() {
		fl = fairnessLoad{chunks: 5_000, big: 5, baseline: 300 * time.Millisecond}
	}
	ids := []string{"host-a", "host-b", "host-c"}[:nHosts]
	clients := map[string]*httpapi.Client{}
	for _, id := range ids {
		home := b.TempDir()
		writeScripted(b, home, bin, map[string]any{"stream": script, "quick": spareScript(0),
			"flood-chunks": agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: fl.chunks}}}}},
			"flood-big":    agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{BigLine: 1 << 20, BigLines: fl.big}}}}}})
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

	// round runs the sessions' turns while the subscribers read, and
	// notes its figures, their names prefixed with prefix; timed says
	// whether the benchmark's clock runs through it. A burst round
	// prompts every session once, all at once; a steady round keeps
	// every session in turns back to back (see steadyS) and measures
	// only its steady window. Each figure is reported as the median of
	// the rounds.
	figures := map[string][]float64{}
	var names []string
	round := func(prefix string, steady, timed bool) {
		if timed {
			b.StopTimer() // the subscribers' set-up is not the round's
		}
		report := func(v float64, unit string) {
			if figures[prefix+unit] == nil {
				names = append(names, prefix+unit)
			}
			figures[prefix+unit] = append(figures[prefix+unit], v)
		}
		// Where each session's log ends before the round.
		from := make([]int64, len(sessions))
		for i, s := range sessions {
			evs, err := clients[s.host].EventLog(ctx, s.id, 0)
			if err != nil || len(evs) == 0 {
				b.Fatalf("event log of %s: %d events, %v", s.id, len(evs), err)
			}
			from[i] = evs[len(evs)-1].Seq
		}
		// Subscribers: session i of the first 100, read through the
		// next host, from the log's end.
		var lat []delivered
		var latMu sync.Mutex
		var dumpF *os.File
		var dumpMu sync.Mutex
		if p := os.Getenv("AGENTPOOL_BENCH_DUMP"); p != "" {
			dumpF, _ = os.Create(p)
		}
		var got atomic.Int64
		sctx, cancel := context.WithCancel(ctx)
		var subs sync.WaitGroup
		// lastEnded[i] is the last turn whose turn.ended the session's
		// subscriber had, lastTurn[i] the last turn its prompts started.
		lastEnded := make([]atomic.Int64, len(sessions))
		lastTurn := make([]int64, len(sessions))
		var subscribed []int
		for i := range subscribers {
			si := i * len(sessions) / subscribers
			subscribed = append(subscribed, si)
			s := sessions[si]
			via := clients[ids[(indexOf(ids, s.host)+1)%len(ids)]]
			if direct := os.Getenv("AGENTPOOL_BENCH_DIRECT") != ""; direct {
				via = clients[s.host] // the owner's own stream, for comparison
			}
			subs.Add(1)
			go func() {
				defer subs.Done()
				var mine []delivered
				_ = via.Events(sctx, s.id, from[si], func(ev backends.Event) error {
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
						lastEnded[si].Store(ev.Turn)
					}
					return nil
				})
				latMu.Lock()
				lat = append(lat, mine...)
				latMu.Unlock()
			}()
		}
		time.Sleep(500 * time.Millisecond)
		if timed {
			b.StartTimer()
		}
		start := time.Now()
		// A steady round's window: from the moment every session is in
		// its turns (its first turn started one turn's length after the
		// round's start at the latest) to steadyS later. A session
		// starts no turn after the window, so the turns end after it, as
		// spread as they started.
		ws, we := start.Add(turnLen), start.Add(turnLen+steadyS)
		var pw sync.WaitGroup
		var failed, turns atomic.Int64
		for i, s := range sessions {
			pw.Add(1)
			go func() {
				defer pw.Done()
				var offset time.Duration
				switch {
				case steady:
					// Evenly over a turn's length, in an order that
					// mixes hosts.
					offset = time.Duration((i*7919)%len(sessions)) * turnLen / time.Duration(len(sessions))
				case spread > 0:
					offset = time.Duration((i*7919)%len(sessions)) * spread / time.Duration(len(sessions))
				}
				time.Sleep(offset)
				ok := true
				for {
					t, err := clients[s.host].Prompt(ctx, s.id, "", "go", true)
					if err != nil || t.StopReason != "end_turn" {
						ok = false
						break
					}
					lastTurn[i] = t.ID
					turns.Add(1)
					if !steady || time.Now().After(we) {
						break
					}
				}
				if !ok {
					failed.Add(1)
				}
			}()
		}
		pw.Wait()
		wall := time.Since(start)
		if timed {
			b.StopTimer()
		}
		// Every subscriber has had the end of its session's last turn,
		// or stops waiting for it a while after the prompts have all
		// been answered (a turn that did not end counts against
		// sessions_with_turn, and its events are missing from
		// events_subscribed).
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			waiting := 0
			for _, si := range subscribed {
				if lastEnded[si].Load() < lastTurn[si] {
					waiting++
				}
			}
			if waiting == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Errorf("%d subscribers had no turn.ended of their session's last turn 30 s after every prompt was answered", waiting)
				break
			}
		}
		cancel()
		subs.Wait()
		stored, inWindow := 0, 0
		for i, s := range sessions {
			evs, err := clients[s.host].EventLog(ctx, s.id, from[i])
			if err != nil {
				b.Fatal(err)
			}
			stored += len(evs)
			for _, ev := range evs {
				if !ev.Time.Before(ws) && ev.Time.Before(we) {
					inWindow++
				}
			}
		}
		if steady {
			report(float64(inWindow)/steadyS.Seconds(), "events_per_s")
		} else {
			report(float64(stored)/wall.Seconds(), "events_per_s")
		}
		report(float64(len(sessions)-int(failed.Load())), "sessions_with_turn")
		report(float64(turns.Load()), "turns")
		if dumpF != nil {
			dumpF.Close()
		}
		var all, first, last, between []time.Duration
		for _, d := range lat {
			switch {
			case steady:
				if !d.at.Before(ws) && d.at.Before(we) {
					all = append(all, d.after)
				}
				continue
			case d.at.Before(start.Add(500 * time.Millisecond)):
				first = append(first, d.after)
			case d.at.After(start.Add(wall - 500*time.Millisecond)):
				last = append(last, d.after)
			default:
				between = append(between, d.after)
			}
			all = append(all, d.after)
		}
		if len(all) > 0 {
			report(ms(quantile(all, 0.5)), "delivery_p50_ms")
			report(ms(quantile(all, 0.99)), "delivery_p99_ms")
			report(ms(quantile(all, 1)), "delivery_max_ms")
		}
		if !steady && len(all) > 0 {
			report(ms(quantile(first, 0.99)), "delivery_p99_start_ms")
			report(ms(quantile(between, 0.99)), "delivery_p99_between_ms")
			report(ms(quantile(last, 0.99)), "delivery_p99_end_ms")
		}
		report(float64(len(all)), "events_measured")
		report(float64(got.Load()), "events_subscribed")
	}
	// The sessions' first turn is every agent's first prompt, and the
	// first events of each session through the daemons (a process's
	// first allocations, its first JSON of each kind, the session's
	// prompt keys read once): reported apart, as first_turn_*, a burst
	// round. Then each iteration is a burst round (burst_*: the 300
	// turns start and end together) and a steady one (the figures
	// without a prefix).
	round("first_turn_", false, false)
	b.ResetTimer()
	for range b.N {
		round("burst_", false, false)
		round("", true, true)
	}
	b.StopTimer()
	clusterFairness(ctx, b, clients[ids[0]], repos[ids[0]], ids[0], fl)
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

// clusterFairness measures, on host h of the cluster (its store shared
// with the others), what one noisy session costs the others, as
// BenchmarkFairness does for one daemon: three bystander sessions of the
// quick agent prompt back to back, alone and then while a session of the
// same host floods fl.chunks small updates, then while another sends
// fl.big updates of 1 MiB. It reports the bystanders' p50 and p99 per
// phase (bystander_*) and p50 as a ratio to the baseline's.
func clusterFairness(ctx context.Context, b *testing.B, c *httpapi.Client, repo, h string, fl fairnessLoad) {
	create := func(agent string) string {
		var created httpapi.CreatedSession
		if err := c.Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": repo, "agent": agent, "host": h}, &created); err != nil {
			b.Fatalf("create a %s session: %v", agent, err)
		}
		return created.ID
	}
	var by []string
	for range bystanders {
		id := create("quick")
		for range 3 { // warm
			if _, err := c.Prompt(ctx, id, "", "warm up", true); err != nil {
				b.Fatal(err)
			}
		}
		by = append(by, id)
	}
	floods := []fairnessFlood{{"chunks", create("flood-chunks")}, {"big", create("flood-big")}}
	phases := measureFairness(ctx, b, c, by, floods, fl.baseline)
	b.Logf("bystander turns on %s (%d sessions, back to back):\n%s", h, bystanders, fairnessTable(phases))
	base := phases[0].q(0.5)
	for _, p := range phases {
		b.ReportMetric(p.q(0.5), "bystander_"+p.name+"_p50_ms")
		b.ReportMetric(p.q(0.99), "bystander_"+p.name+"_p99_ms")
		if p.session != "" {
			b.ReportMetric(p.q(0.5)/base, "bystander_"+p.name+"_p50/base")
			if p.read.err != nil {
				b.Error(p.read.err)
			}
		}
	}
}
