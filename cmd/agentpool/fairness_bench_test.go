package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// fairnessLoad is what runFairness runs: the size of each fault.
type fairnessLoad struct {
	chunks   int           // small updates of the first flood, in one turn
	big      int           // updates of 1 MiB of the second flood, in one turn
	baseline time.Duration // how long the bystanders prompt alone first
}

// fairnessPhase is one phase of runFairness: the bystanders' turns
// (prompt sent → answer, ?wait=true) while it ran.
type fairnessPhase struct {
	name string
	lat  []time.Duration
	// prompts are the bystanders' turns, by session, for breakdown.
	prompts map[string][]bystanderPrompt
	// For a fault: its flooding session, how long its turn took, what
	// a reader following its session from its first event saw, and the
	// write queues just after its turn ended.
	session string
	turn    time.Duration
	read    floodRead
	queues  []pool.WriteQueue
}

// floodRead is what a follower of a flooding session read until its
// turn's end: the updates of the flood and whether their seqs only grew.
type floodRead struct {
	updates  int   // message chunks of the flood's turn
	bigBytes int64 // their bytes
	// misordered counts the events whose seq was not the previous one's
	// plus one (a gap, a repeat or a step back).
	misordered int
	slowed     int // agent.slowed events
	err        error
}

// q returns the p quantile of the phase's latencies, in milliseconds.
func (p *fairnessPhase) q(f float64) float64 {
	if len(p.lat) == 0 {
		return 0
	}
	s := slices.Clone(p.lat)
	slices.Sort(s)
	return float64(s[int(f*float64(len(s)-1))]) / float64(time.Millisecond)
}

// bystanders is the number of sessions prompting back to back meanwhile.
const bystanders = 3

// runFairness runs the daemon bin with three bystander sessions on a quick
// agent prompting back to back: first alone (the baseline), then while
// another session's agent floods load.chunks small updates in one turn,
// then while a third's sends load.big updates of 1 MiB, each flood
// followed by a reader from its first event. It returns the phases, the
// baseline first, and the client (for the daemon's metrics).
func runFairness(tb testing.TB, bin string, load fairnessLoad) ([]fairnessPhase, *httpapi.Client) {
	const size = 1 << 20
	home := tb.TempDir()
	writeBenchProviders(tb, home, map[string]agenttest.Script{
		"chunks": {Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: load.chunks}}}}},
		"big":    {Turns: []agenttest.Turn{{Steps: []agenttest.Step{{BigLine: size, BigLines: load.big}}}}},
		"quick":  {Turns: []agenttest.Turn{{Echo: true}}},
	})
	repo := benchRepo(tb)
	// AGENTPOOL_BENCH_ARGS adds arguments to the daemon's serve, e.g.
	// "--slowed-rate 0" to measure it without pacing.
	_, client, _ := startBenchDaemon(tb, bin, home, strings.Fields(os.Getenv("AGENTPOOL_BENCH_ARGS"))...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	tb.Cleanup(cancel)
	create := func(agent string) string {
		s, err := client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: agent})
		if err != nil {
			tb.Fatalf("create session: %v", err)
		}
		return s.ID
	}
	var by []string
	for range bystanders {
		id := create("quick")
		by = append(by, id)
		for range 3 { // warm: the agent's process, the worktree's index
			if _, err := client.Prompt(ctx, id, "", "warm up", true); err != nil {
				tb.Fatal(err)
			}
		}
	}
	floods := []fairnessFlood{{"chunks", create("chunks")}, {"big", create("big")}}
	return measureFairness(ctx, tb, client, by, floods, load.baseline), client
}

// fairnessFlood is a session whose agent floods at its next prompt, and
// the name of its phase.
type fairnessFlood struct{ name, session string }

// measureFairness has the bystander sessions by (warm, on a quick agent)
// prompt back to back through client, first alone for baseline, then
// while each of floods is prompted in turn (its turn waited for, a reader
// following its session from its first event), and returns the phases,
// the baseline first.
func measureFairness(ctx context.Context, tb testing.TB, client *httpapi.Client, by []string, floods []fairnessFlood, baseline time.Duration) []fairnessPhase {
	// prompt runs the bystanders back to back until stop is closed, and
	// returns their turns' latencies.
	prompt := func(stop <-chan struct{}) ([]time.Duration, map[string][]bystanderPrompt) {
		var mu sync.Mutex
		var lat []time.Duration
		prompts := map[string][]bystanderPrompt{}
		var wg sync.WaitGroup
		for _, id := range by {
			wg.Go(func() {
				ps := promptUntil(ctx, tb, client, id, stop, 0) // bigupdates_bench_test.go
				mu.Lock()
				defer mu.Unlock()
				prompts[id] = ps
				for _, p := range ps {
					lat = append(lat, p.answered.Sub(p.sent))
				}
			})
		}
		wg.Wait()
		return lat, prompts
	}

	var phases []fairnessPhase
	stop := make(chan struct{})
	time.AfterFunc(baseline, func() { close(stop) })
	base := fairnessPhase{name: "baseline"}
	base.lat, base.prompts = prompt(stop)
	phases = append(phases, base)

	for _, f := range floods {
		ph := fairnessPhase{name: f.name, session: f.session}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { ph.lat, ph.prompts = prompt(stop) })
		time.Sleep(100 * time.Millisecond) // the bystanders are under way
		followed := make(chan floodRead, 1)
		go func() { followed <- followFlood(ctx, client, f.session) }()
		start := time.Now()
		if _, err := client.Prompt(ctx, f.session, "", "flood", true); err != nil {
			tb.Errorf("flood prompt: %v", err)
		}
		ph.turn = time.Since(start)
		if st, err := client.Pool(ctx); err != nil {
			tb.Errorf("pool status: %v", err)
		} else {
			ph.queues = st.WriteQueues
		}
		ph.read = <-followed
		close(stop)
		wg.Wait()
		phases = append(phases, ph)
	}
	return phases
}

// followFlood follows session from its first event until its first
// turn's end and counts the turn's message chunks. It reads the stream's
// lines as they come, without decoding the events' data (a reader
// decoding 300 MiB of JSON would be the slowest part of the test, not the
// daemon), and keeps each event's id (its seq), type and data's size.
func followFlood(ctx context.Context, client *httpapi.Client, session string) floodRead {
	var r floodRead
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, client.BaseURL+"/v1/sessions/"+session+"/events?after=0", nil)
	if err != nil {
		return floodRead{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+client.Token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return floodRead{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return floodRead{err: fmt.Errorf("events of %s: %s", session, resp.Status)}
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	last, seq := int64(0), int64(0)
	var typ string
	var size int64
	for {
		line, err := br.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) { // a big event's data
			size += int64(len(line))
			line, err = br.ReadSlice('\n')
		}
		if err != nil {
			r.err = fmt.Errorf("events of %s after seq %d: %w", session, last, err)
			return r
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case bytes.HasPrefix(line, []byte("id: ")):
			seq, _ = strconv.ParseInt(string(line[4:]), 10, 64)
		case bytes.HasPrefix(line, []byte("event: ")):
			typ = string(line[7:])
		case bytes.HasPrefix(line, []byte("data: ")):
			size += int64(len(line))
		case len(line) == 0 && typ != "": // the event's end
			if seq != 0 {
				if seq != last+1 {
					r.misordered++
				}
				last = seq
			}
			switch backends.EventType(typ) {
			case backends.EventAgentSlowed:
				r.slowed++
			case backends.EventMessageChunk:
				r.updates++
				r.bigBytes += size
			case backends.EventTurnEnded:
				return r
			}
			seq, typ, size = 0, "", 0
		}
	}
}

// fairnessTable formats phases as the table the benchmark logs.
func fairnessTable(phases []fairnessPhase) string {
	var b strings.Builder
	base := phases[0].q(0.5)
	fmt.Fprintf(&b, "%-9s %7s %8s %8s %8s %9s %10s\n", "phase", "turns", "p50-ms", "p99-ms", "max-ms", "p50/base", "flood-turn")
	for _, p := range phases {
		ratio := 0.0
		if base > 0 {
			ratio = p.q(0.5) / base
		}
		ft := "-"
		if p.session != "" {
			ft = p.turn.Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "%-9s %7d %8.1f %8.1f %8.1f %9.2f %10s\n", p.name, len(p.lat), p.q(0.5), p.q(0.99), p.q(1), ratio, ft)
	}
	return b.String()
}

// BenchmarkFairness measures what one noisy agent costs the others: three
// bystander sessions prompt a quick agent back to back, first alone (the
// baseline), then while another session's agent floods 100,000 small
// updates in one turn, then while another's sends 300 updates of 1 MiB,
// each flood followed by a reader from its first event. It reports the
// bystanders' turn p50 and p99 in each phase, p50 as a ratio to the
// baseline's, and the floods' own turns. AGENTPOOL_BENCH_ARGS adds
// arguments to the daemon ("--slowed-rate 0": without pacing).
//
//	go test -run '^$' -bench Fairness -benchtime 1x ./cmd/agentpool
func BenchmarkFairness(b *testing.B) {
	load := fairnessLoad{chunks: 100_000, big: 300, baseline: 3 * time.Second}
	if testing.Short() {
		load = fairnessLoad{chunks: 5_000, big: 10, baseline: 300 * time.Millisecond}
	}
	bin := agentpoolBinary(b)
	for range b.N {
		phases, client := runFairness(b, bin, load)
		b.Logf("bystander turns (%d sessions, back to back):\n%s", bystanders, fairnessTable(phases))
		for _, p := range phases {
			b.Log(turnParts(b.Context(), client, p))
			for _, q := range p.queues {
				b.Logf("%s: write queue of %s: %+v", p.name, q.Session, q)
			}
		}
		base := phases[0].q(0.5)
		for _, p := range phases {
			b.ReportMetric(p.q(0.5), p.name+"-p50-ms")
			b.ReportMetric(p.q(0.99), p.name+"-p99-ms")
			if p.session != "" {
				b.ReportMetric(p.q(0.5)/base, p.name+"-p50/base")
				b.ReportMetric(p.turn.Seconds(), p.name+"-flood-s")
				if p.read.err != nil {
					b.Error(p.read.err)
				}
			}
		}
	}
}

// turnParts splits the bystanders' turns of a phase into their parts (see
// reportTurnBreakdown: start, agent, end, answer) and returns each part's
// p50 and p99 and the parts of the slowest turns, as text.
func turnParts(ctx context.Context, client *httpapi.Client, ph fairnessPhase) string {
	var rows []turnSplit
	for id, prompts := range ph.prompts {
		byTurn := map[int64]*turnStamps{}
		for _, p := range prompts {
			byTurn[p.turn] = &turnStamps{}
		}
		evs, err := client.EventLog(ctx, id, 0)
		if err != nil {
			return err.Error()
		}
		for _, ev := range evs {
			noteTurnStamp(byTurn, ev)
		}
		rows = append(rows, splitTurns(prompts, byTurn)...)
	}
	if len(rows) == 0 {
		return "no turn has its events"
	}
	var b strings.Builder
	for j, q := range []float64{0.5, 0.99} {
		if j > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s: p%.0f of", ph.name, q*100)
		for i, d := range partsQ(rows, q) {
			fmt.Fprintf(&b, " %s %.1f ms", turnPartNames[i], msOf(d))
		}
	}
	for _, r := range slowestTurns(rows, 3) {
		fmt.Fprintf(&b, "\n  slow turn %s", r)
	}
	return b.String()
}
