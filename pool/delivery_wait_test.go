package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// TestWaitedEventsDoNotWaitForTheLinger checks that what a caller waits
// for is committed at once rather than after the store's linger: with a
// store that would wait an hour to fill a batch, Create returns with
// session.created on the stream and a waited prompt with its turn.ended
// on the stream. Without the nudge both would give up after the pool's
// delivery bound (5 s) with the event still unwritten.
func TestWaitedEventsDoNotWaitForTheLinger(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(agenttest.Script{})}, nil)
	e.shutdown()
	e.linger = time.Hour
	e.open()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	headOf := func(session string) backends.Event {
		t.Helper()
		sub, err := e.p.Subscribe(ctx, session, 0)
		if err != nil {
			t.Fatalf("Subscribe(%s): %v", session, err)
		}
		defer sub.Close()
		var last backends.Event
		for last.Seq < sub.Head() {
			evs, err := sub.Next(ctx, 0)
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			last = evs[len(evs)-1]
		}
		return last
	}

	// Create returns once session.created is on the stream (the agent's
	// start, begun meanwhile, may have put its first events after it).
	s := e.session("fake")
	sub, err := e.p.Subscribe(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sub.Head() < 1 {
		t.Fatalf("the stream held nothing when Create returned; want session.created")
	}
	first, err := sub.Next(ctx, 1)
	sub.Close()
	if err != nil || len(first) != 1 || first[0].Type != backends.EventSessionCreated {
		t.Fatalf("first event on the stream when Create returned = %+v, %v; want %s", first, err, backends.EventSessionCreated)
	}
	for i := range 3 {
		tn := e.prompt(s.ID, "", "hello")
		ev := headOf(s.ID)
		if ev.Type != backends.EventTurnEnded || ev.Turn != tn.ID {
			t.Fatalf("prompt %d: newest event on the stream when Prompt returned = %q of turn %d (seq %d); want %s of turn %d",
				i+1, ev.Type, ev.Turn, ev.Seq, backends.EventTurnEnded, tn.ID)
		}
	}
}
