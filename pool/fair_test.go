package pool_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// heldStore is a store whose write queue holds one session's events: each
// waits for room (1 ms) before it is appended.
type heldStore struct {
	pool.Store
	held  atomic.Value // string: the session held
	waits atomic.Int64
}

func (h *heldStore) WaitRoomFor(ctx context.Context, session string) (time.Duration, error) {
	if s, _ := h.held.Load().(string); s == session {
		h.waits.Add(1)
		time.Sleep(time.Millisecond)
		return time.Millisecond, nil
	}
	return h.Store.WaitRoomFor(ctx, session)
}

// heldEnv is an env whose store's write queue can hold one session's
// events (heldStore), with a session of agent flood (running script) and
// one of a quick agent.
func heldEnv(t *testing.T, flood agenttest.Script, tweak func(*pool.Config)) (*env, *heldStore, pool.Session, pool.Session) {
	t.Helper()
	e := newEnv(t, map[string]any{"flood": providerEntry(flood), "fake": providerEntry(echo)}, tweak)
	hs := &heldStore{}
	e.wrapStore = func(s pool.Store) pool.Store { hs.Store = s; return hs }
	e.shutdown()
	e.open()
	return e, hs, e.session("flood"), e.session("fake")
}

// An agent whose events wait for room in the store's write queue says so
// once in its session (agent.slowed), however many of them wait, and
// again only in a new episode; every event is still stored, in order; a
// session whose events find room says nothing.
func TestSlowedAgentSaysSoOncePerEpisode(t *testing.T) {
	flood := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: 200}}}}}
	e, hs, slow, quick := heldEnv(t, flood, nil)
	hs.held.Store(slow.ID)
	e.prompt(slow.ID, "", "go")
	e.prompt(quick.ID, "", "hello")
	if hs.waits.Load() < 200 {
		t.Fatalf("%d events waited for room; want the flood's 200 at least", hs.waits.Load())
	}
	evs := e.events(slow.ID)
	if n := countType(evs, backends.EventAgentSlowed); n != 1 {
		t.Fatalf("%d agent.slowed events; want 1", n)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		if ev.Type != backends.EventAgentSlowed {
			continue
		}
		var d pool.SlowedData
		if err := json.Unmarshal(ev.Data, &d); err != nil || d.Message != pool.SlowedMessage || ev.Agent != "flood" {
			t.Errorf("agent.slowed = %s by %q (%v); want the message, by flood", ev.Data, ev.Agent, err)
		}
	}
	if n := countType(evs, backends.EventMessageChunk); n != 200 {
		t.Errorf("%d chunks stored; want 200", n)
	}
	if n := countType(e.events(quick.ID), backends.EventAgentSlowed); n != 0 {
		t.Errorf("the quick session has %d agent.slowed events; want none", n)
	}
	// While slowed, the flooding agent runs 10 nicer; the other does not.
	nice := func(session string) int {
		t.Helper()
		for _, b := range e.p.Backends() {
			if b.Session == session && b.PID > 0 {
				p, err := unix.Getpriority(unix.PRIO_PROCESS, b.PID)
				if err != nil {
					t.Fatal(err)
				}
				return 20 - p
			}
		}
		t.Fatalf("no running agent in %s", session)
		return 0
	}
	base := nice(quick.ID)
	if got := nice(slow.ID); got != min(base+10, 19) {
		t.Errorf("the slowed agent runs at nice %d; want %d (the other's %d + 10)", got, min(base+10, 19), base)
	}
	// The episode goes on while the flood's events keep waiting; it ends
	// once they find room for a while (pool.SlowEpisodeGap), and the next
	// wait says so again.
	e.prompt(slow.ID, "", "go")
	if n := countType(e.events(slow.ID), backends.EventAgentSlowed); n != 1 {
		t.Fatalf("%d agent.slowed events after a second held turn at once; want still 1", n)
	}
	hs.held.Store("")
	e.prompt(slow.ID, "", "go") // finds room
	time.Sleep(pool.SlowEpisodeGap)
	e.prompt(slow.ID, "", "go") // finds room after the gap: the episode ends
	if got := nice(slow.ID); got != base {
		t.Errorf("after its episode the agent runs at nice %d; want %d again", got, base)
	}
	hs.held.Store(slow.ID)
	e.prompt(slow.ID, "", "go")
	if n := countType(e.events(slow.ID), backends.EventAgentSlowed); n != 2 {
		t.Errorf("%d agent.slowed events after a new episode; want 2", n)
	}
}

// A slowed agent is paced at Config.SlowedRate while another session is
// at work: its turn takes what its bytes take at that rate, and it waits,
// not the others. Alone, it is held by the write queue's room only; and
// every event is stored, in order, either way.
func TestSlowedAgentPacedWhileOthersWork(t *testing.T) {
	const lines, size, rate = 80, 64 << 10, 4 << 20 // 5 MiB at 4 MiB/s: 1.25 s
	flood := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{BigLine: size, BigLines: lines}}}}}
	e, hs, slow, quick := heldEnv(t, flood, func(c *pool.Config) { c.SlowedRate = rate })
	e.prompt(quick.ID, "", "warm up")
	hs.held.Store(slow.ID)
	time.Sleep(2 * pool.OthersActive) // the warm-up is past

	// Alone: no pacing.
	e.prompt(slow.ID, "", "go")
	if d := pool.Paced(e.p, slow.ID); d != 0 {
		t.Fatalf("the flood alone was paced %v; want no pacing when no other session is at work", d)
	}

	// With another session prompting back to back: paced.
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			e.prompt(quick.ID, "", "hello")
			n++
		}
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	var seenSlowed atomic.Bool
	watching := make(chan struct{})
	go func() { // GET /v1/pool's write_queues while it floods
		defer close(watching)
		for time.Since(start) < 5*time.Second && !seenSlowed.Load() {
			for _, q := range e.p.WriteQueues() {
				if q.Session == slow.ID && q.Slowed {
					seenSlowed.Store(true)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	e.prompt(slow.ID, "", "go")
	took := time.Since(start)
	<-watching
	close(stop)
	turns := <-done
	// At the rate, after the burst it is credited with at first.
	want := time.Duration(float64(lines*size)/rate*float64(time.Second)) - pool.PaceBurst
	paced := pool.Paced(e.p, slow.ID)
	if took < want*7/10 || paced < want/3 {
		t.Errorf("the flood's turn took %v, paced %v, beside %d turns of another session; want at least %v at the slowed rate", took, paced, turns, want)
	}
	if paced > want*11/10 {
		t.Errorf("the flood was paced %v; want at most about %v (%d bytes at %d B/s)", paced, want, lines*size, rate)
	}
	if turns < 5 {
		t.Errorf("the other session had %d turns during the flood; want it to go on", turns)
	}
	if !seenSlowed.Load() {
		t.Errorf("the pool's write queues never said the paced session was slowed")
	}
	if d := pool.Paced(e.p, quick.ID); d != 0 {
		t.Errorf("the other session was paced %v; want none", d)
	}
	evs := e.events(slow.ID)
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
	if n := countType(evs, backends.EventMessageChunk); n != 2*lines {
		t.Errorf("%d chunks stored; want %d", n, 2*lines)
	}
	// Paced, it is still slowed: one episode, said once.
	if n := countType(evs, backends.EventAgentSlowed); n != 1 {
		t.Errorf("%d agent.slowed events; want 1", n)
	}
}
