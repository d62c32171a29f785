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

// An agent whose events wait for room in the store's write queue says so
// once in its session (agent.slowed), however many of them wait, and
// again only in a new episode; every event is still stored, in order; a
// session whose events find room says nothing.
func TestSlowedAgentSaysSoOncePerEpisode(t *testing.T) {
	flood := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: 200}}}}}
	e := newEnv(t, map[string]any{"flood": providerEntry(flood), "fake": providerEntry(echo)}, nil)
	hs := &heldStore{}
	e.wrapStore = func(s pool.Store) pool.Store { hs.Store = s; return hs }
	e.shutdown()
	e.open()
	slow := e.session("flood")
	quick := e.session("fake")
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
