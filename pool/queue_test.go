package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// waitCancel is an agent whose turns run until cancelled.
var waitCancel = agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "working"}, {WaitCancel: true}}}}}

// orderOf returns the types of the events of turn (and of its agent's
// life-cycle while it ran), in order.
func orderOf(evs []backends.Event, turn int64) []string {
	var out []string
	for _, ev := range evs {
		if ev.Turn == turn {
			out = append(out, string(ev.Type))
		}
	}
	return out
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func dataOf(t testing.TB, ev backends.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ev.Data, &m); err != nil {
		t.Fatalf("data of %s: %v", ev.Type, err)
	}
	return m
}

// TestAgentStartingCarriesItsTurn: the agent started for a prompt says
// which turn it starts for, after that turn's turn.started. (The session
// has no warm-up, which would start its agent before any turn.)
func TestAgentStartingCarriesItsTurn(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, nil)
	noWarm := false
	s, err := e.p.Create(context.Background(), pool.CreateRequest{Repo: e.repo, Agent: "fake", Warm: &noWarm})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	tn := e.prompt(s.ID, "", "hello")
	evs := e.events(s.ID)
	started, starting := -1, -1
	for i, ev := range evs {
		switch ev.Type {
		case backends.EventTurnStarted:
			started = i
		case backends.EventAgentStarting:
			starting = i
			if ev.Turn != tn.ID {
				t.Errorf("agent.starting has turn %d; want %d", ev.Turn, tn.ID)
			}
		}
	}
	if started < 0 || starting < 0 || starting < started {
		t.Fatalf("turn.started at %d, agent.starting at %d; want agent.starting after turn.started: %v", started, starting, typesOf(evs))
	}
}

// TestQueueFIFOAndBound: with every slot busy a prompt waits its turn in
// order instead of failing; past the queue's bound it is refused without a
// turn; a slot that frees up goes to the first waiter.
func TestQueueFIFOAndBound(t *testing.T) {
	e := newEnv(t, map[string]any{"slow": providerEntry(waitCancel)}, func(c *pool.Config) { c.MaxWarm = 1 })
	pool.SetMaxQueued(e.p, 2)
	ctx := context.Background()
	// No warm-up: the one slot goes to the first prompt, not to a warm-up.
	s1, s2, s3, s4 := e.create("slow", false), e.create("slow", false), e.create("slow", false), e.create("slow", false)
	t1, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s1.ID, Text: "one"})
	if err != nil || t1.QueuePosition != 0 {
		t.Fatalf("StartPrompt(s1) = %+v, %v; want it to run at once", t1, err)
	}
	t2, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s2.ID, Text: "two"})
	if err != nil || t2.QueuePosition != 1 {
		t.Fatalf("StartPrompt(s2) = %+v, %v; want queue position 1", t2, err)
	}
	t3, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s3.ID, Text: "three"})
	if err != nil || t3.QueuePosition != 2 {
		t.Fatalf("StartPrompt(s3) = %+v, %v; want queue position 2", t3, err)
	}
	_, err = e.p.StartPrompt(ctx, pool.PromptRequest{Session: s4.ID, Text: "four"})
	if !errors.Is(err, pool.ErrAtCapacity) || !strings.Contains(err.Error(), "wait") {
		t.Fatalf("StartPrompt(s4) past the queue's bound error = %v; want ErrAtCapacity saying prompts wait", err)
	}
	if n := countType(e.events(s4.ID), backends.EventTurnStarted); n != 0 {
		t.Errorf("a refused prompt has %d turn.started; want none", n)
	}
	if st := e.p.Stats(); st.Queued != 2 {
		t.Errorf("Stats().Queued = %d; want 2", st.Queued)
	}
	// s1's turn ends: its backend is evicted for s2, not s3.
	if err := e.p.Cancel(ctx, s1.ID); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "s2's turn to run", func() bool { return countType(e.events(s2.ID), backends.EventMessageChunk) > 0 })
	if n := countType(e.events(s3.ID), pool.EventTurnDequeued); n != 0 {
		t.Fatalf("s3 was served before s2")
	}
	if n := countType(e.events(s1.ID), "agent.evicted"); n != 1 {
		t.Errorf("s1 has %d agent.evicted; want its idle agent evicted for the waiter", n)
	}
	order := orderOf(e.events(s2.ID), t2.ID)
	want := []string{string(backends.EventTurnStarted), string(pool.EventTurnQueued), string(pool.EventTurnDequeued), string(backends.EventAgentStarting)}
	last := -1
	for _, typ := range want {
		i := indexOf(order, typ)
		if i <= last {
			t.Fatalf("events of queued turn %d = %v; want %v in this order", t2.ID, order, want)
		}
		last = i
	}
	if err := e.p.Cancel(ctx, s2.ID); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "s3's turn to run", func() bool { return countType(e.events(s3.ID), backends.EventMessageChunk) > 0 })
	if err := e.p.Cancel(ctx, s3.ID); err != nil {
		t.Fatal(err)
	}
	if st := e.p.Stats(); st.Queued != 0 || st.QueuedTotal != 2 {
		t.Errorf("Stats() queued = %d, total %d; want 0, 2", st.Queued, st.QueuedTotal)
	}
}

// TestQueuedTurnEnds: a queued turn ends, without running, on a cancel,
// on its session's close and on the pool's shutdown, with turn.ended
// saying so; the queue forgets it.
func TestQueuedTurnEnds(t *testing.T) {
	e := newEnv(t, map[string]any{"slow": providerEntry(waitCancel)}, func(c *pool.Config) { c.MaxWarm = 1 })
	ctx := context.Background()
	// No warm-up: the one slot goes to the first prompt, not to a warm-up.
	s1, s2, s3, s4 := e.create("slow", false), e.create("slow", false), e.create("slow", false), e.create("slow", false)
	if _, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s1.ID, Text: "busy"}); err != nil {
		t.Fatal(err)
	}
	queue := func(id string) pool.Turn {
		t.Helper()
		tn, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: id, Text: "wait"})
		if err != nil || tn.QueuePosition == 0 {
			t.Fatalf("StartPrompt(%s) = %+v, %v; want it queued", id, tn, err)
		}
		return tn
	}
	ended := func(id string, turn int64, wantReason string) {
		t.Helper()
		for _, ev := range e.events(id) {
			if ev.Type == backends.EventTurnEnded && ev.Turn == turn {
				d := dataOf(t, ev)
				if d["stop_reason"] != "cancelled" || !strings.Contains(fmt.Sprint(d["reason"]), wantReason) {
					t.Errorf("turn.ended of queued turn %d = %v; want cancelled, reason with %q", turn, d, wantReason)
				}
				if n := countType(e.events(id), backends.EventAgentStarting); n != 0 {
					t.Errorf("a queued turn that ended started %d agents", n)
				}
				return
			}
		}
		t.Fatalf("no turn.ended for queued turn %d of %s: %v", turn, id, typesOf(e.events(id)))
	}

	t2 := queue(s2.ID)
	if err := e.p.Cancel(ctx, s2.ID); err != nil {
		t.Fatalf("Cancel of a queued turn: %v", err)
	}
	if got, err := e.p.WaitTurn(ctx, s2.ID, t2.ID); err != nil || got.StopReason != "cancelled" {
		t.Errorf("WaitTurn(cancelled queued turn) = %+v, %v", got, err)
	}
	ended(s2.ID, t2.ID, "cancelled while waiting")

	t3 := queue(s3.ID)
	if _, err := e.p.Close(ctx, s3.ID, true); err != nil {
		t.Fatalf("Close of a session with a queued turn: %v", err)
	}
	ended(s3.ID, t3.ID, "cancelled while waiting")

	t4 := queue(s4.ID)
	if st := e.p.Stats(); st.Queued != 1 {
		t.Errorf("Stats().Queued = %d; want 1 (only s4's)", st.Queued)
	}
	sub, err := e.p.Subscribe(ctx, s4.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := e.p.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown with a queued turn: %v", err)
	}
	var end *backends.Event
	for end == nil {
		evs, err := sub.Next(ctx, 0)
		if err != nil {
			t.Fatalf("no turn.ended for s4's queued turn before the stream ended: %v", err)
		}
		for i := range evs {
			if evs[i].Type == backends.EventTurnEnded && evs[i].Turn == t4.ID {
				end = &evs[i]
			}
		}
	}
	if d := dataOf(t, *end); d["stop_reason"] != "cancelled" || !strings.Contains(fmt.Sprint(d["reason"]), "shut down") {
		t.Errorf("turn.ended of a turn queued at shutdown = %v", d)
	}
}

// TestFairCapacity: 100 sessions prompting in a loop on 16 slots. Every
// session gets turns, and no turn waits longer than the FIFO bound:
// a turn queued at position k waits at most ceil(k/16) × H, where H is the
// longest time a turn held its slot (its agent's start, the turn, the
// checkpoints), since each of the 16 slots is released at least once in
// any span of H and each release serves the first waiter.
func TestFairCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("100 sessions, several seconds")
	}
	const (
		sessions = 100
		slots    = 16
		run      = 5 * time.Second
	)
	script := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{SleepMs: 30}, {Chunk: "done"}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(script)}, func(c *pool.Config) {
		c.MaxWarm = slots
		c.IdleTimeout = time.Hour
	})
	t0 := time.Now()
	ids := make([]string, sessions)
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s, err := e.p.Create(context.Background(), pool.CreateRequest{Repo: e.repo, Agent: "fake"})
				if err != nil {
					t.Errorf("Create: %v", err)
					continue
				}
				ids[i] = s.ID
			}
		}()
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	t.Logf("created %d sessions in %v", sessions, time.Since(t0))
	t0 = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), run+30*time.Second)
	defer cancel()
	deadline := time.Now().Add(run)
	counts := make([]int, sessions)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				tn, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: id, Text: "go"})
				if err != nil {
					t.Errorf("StartPrompt(%s): %v", id, err)
					return
				}
				done, err := e.p.WaitTurn(ctx, id, tn.ID)
				if err != nil || done.StopReason != "end_turn" {
					t.Errorf("turn %d of %s = %+v, %v", tn.ID, id, done, err)
					return
				}
				counts[i]++
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("ran in %v", time.Since(t0))
	t0 = time.Now()
	defer func() { t.Logf("analysed in %v", time.Since(t0)) }()

	// Per turn: its place in the queue, its wait, and how long it held
	// its slot (from the grant, or from turn.started when it was not
	// queued, to turn.ended: never shorter than the hold).
	type turnTimes struct {
		pos                               int
		started, queued, dequeued, ending time.Time
	}
	var holdMax, waitMax time.Duration
	var ratioMax float64
	queued := 0
	var waits []struct {
		pos  int
		wait time.Duration
	}
	for _, id := range ids {
		byTurn := map[int64]*turnTimes{}
		get := func(n int64) *turnTimes {
			if byTurn[n] == nil {
				byTurn[n] = &turnTimes{}
			}
			return byTurn[n]
		}
		for _, ev := range e.events(id) {
			switch ev.Type {
			case backends.EventTurnStarted:
				get(ev.Turn).started = ev.Time
			case pool.EventTurnQueued:
				tt := get(ev.Turn)
				tt.queued = ev.Time
				tt.pos = int(dataOf(t, ev)["position"].(float64))
			case pool.EventTurnDequeued:
				get(ev.Turn).dequeued = ev.Time
			case backends.EventTurnEnded:
				get(ev.Turn).ending = ev.Time
			}
		}
		for n, tt := range byTurn {
			if tt.ending.IsZero() {
				t.Fatalf("turn %d of %s has no turn.ended", n, id)
			}
			from := tt.started
			if tt.pos > 0 {
				if tt.dequeued.IsZero() {
					t.Fatalf("queued turn %d of %s has no turn.dequeued", n, id)
				}
				from = tt.dequeued
				queued++
				waits = append(waits, struct {
					pos  int
					wait time.Duration
				}{tt.pos, tt.dequeued.Sub(tt.queued)})
			}
			holdMax = max(holdMax, tt.ending.Sub(from))
		}
	}
	maxPos := 0
	for _, w := range waits {
		bound := time.Duration((w.pos+slots-1)/slots) * holdMax
		if w.wait > bound {
			t.Errorf("a turn queued at position %d waited %v; want at most ceil(%d/%d) × %v = %v", w.pos, w.wait, w.pos, slots, holdMax, bound)
		}
		waitMax = max(waitMax, w.wait)
		maxPos = max(maxPos, w.pos)
		ratioMax = max(ratioMax, float64(w.wait)/float64(bound))
	}
	sorted := append([]int(nil), counts...)
	sort.Ints(sorted)
	total := 0
	for _, c := range sorted {
		total += c
	}
	if sorted[0] == 0 {
		t.Errorf("%d of %d sessions got no turn in %v", sort.SearchInts(sorted, 1), sessions, run)
	}
	if queued == 0 {
		t.Errorf("no turn was queued: the test did not load the pool")
	}
	t.Logf("%d sessions on %d slots for %v: %d turns (%d queued); turns per session min %d, median %d, max %d",
		sessions, slots, run, total, queued, sorted[0], sorted[len(sorted)/2], sorted[len(sorted)-1])
	t.Logf("longest hold of a slot H = %v; longest wait %v (deepest position %d, bound ceil(%d/%d) × H = %v); worst wait/bound %.2f",
		holdMax, waitMax, maxPos, maxPos, slots, time.Duration((maxPos+slots-1)/slots)*holdMax, ratioMax)
}
