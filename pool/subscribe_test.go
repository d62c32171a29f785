package pool_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// nextOfType reads sub until an event of type typ, which it returns.
func nextOfType(t testing.TB, sub *pool.Subscription, typ backends.EventType) backends.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		evs, err := sub.Next(ctx, 1)
		if err != nil {
			t.Fatalf("Next() waiting for %s: %v", typ, err)
		}
		if evs[0].Type == typ {
			return evs[0]
		}
	}
}

// readAll reads sub until Next fails, checking that seqs follow after+1,
// after+2, ...; it returns the events and Next's error.
func readAll(t testing.TB, sub *pool.Subscription, after int64) ([]backends.Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []backends.Event
	for {
		evs, err := sub.Next(ctx, 0)
		if err != nil {
			return out, err
		}
		for _, ev := range evs {
			if want := after + int64(len(out)) + 1; ev.Seq != want {
				t.Fatalf("Next() gave seq %d; want %d", ev.Seq, want)
			}
			out = append(out, ev)
		}
	}
}

// Subscribers that join at random moments with random starting points, while
// thousands of events are published, each see every event after their
// starting point exactly once and in order.
func TestSubscribeGapFreeUnderConcurrentPublishing(t *testing.T) {
	const chunks = 3000
	flood := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: chunks}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(flood)}, func(c *pool.Config) {
		c.RingSize = 64 // most late joiners must read the store
	})
	s := e.session("fake")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	results := make(chan error, 64)
	start := make(chan struct{})
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
			cur, err := e.p.Get(ctx, s.ID)
			if err != nil {
				results <- err
				return
			}
			// Strictly before the last event, so the turn's end is still ahead.
			after := int64(0)
			if cur.LastSeq > 1 {
				after = rand.Int64N(cur.LastSeq)
			}
			sub, err := e.p.Subscribe(ctx, s.ID, after)
			if err != nil {
				results <- err
				return
			}
			defer sub.Close()
			limit := rand.IntN(100) // 0: everything available
			next := after + 1
			for {
				evs, err := sub.Next(ctx, limit)
				if err != nil {
					t.Errorf("subscriber after %d: Next() after seq %d error = %v; want the turn's end first", after, next-1, err)
					results <- nil
					return
				}
				if limit > 0 && len(evs) > limit {
					t.Errorf("Next(ctx, %d) returned %d events", limit, len(evs))
				}
				for _, ev := range evs {
					if ev.Seq != next {
						t.Errorf("subscriber after %d: got seq %d; want %d", after, ev.Seq, next)
						results <- nil
						return
					}
					next++
					if ev.Type == backends.EventTurnEnded {
						results <- nil
						return
					}
				}
			}
		}()
	}
	close(start)
	tn := e.prompt(s.ID, "", "flood")
	if tn.StopReason != "end_turn" {
		t.Fatalf("turn = %+v", tn)
	}
	wg.Wait()
	close(results)
	for err := range results {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.events(s.ID)); n < chunks {
		t.Fatalf("stored %d events; want at least %d", n, chunks)
	}
}

// A subscriber that reads nothing during a turn neither blocks it nor is
// dropped: afterwards it reads everything, the part older than the ring
// from the store.
func TestLaggingSubscriberReadsTheStore(t *testing.T) {
	flood := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: 500}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(flood)}, func(c *pool.Config) { c.RingSize = 16 })
	s := e.session("fake")
	ctx := context.Background()
	slow, err := e.p.Subscribe(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	e.prompt(s.ID, "", "go") // never blocked by the subscriber that does not read
	cur, err := e.p.Get(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []backends.Event
	for int64(len(got)) < cur.LastSeq {
		// Full batches from the store, then a short one, then the ring.
		evs, err := slow.Next(ctx, 100)
		if err != nil || len(evs) > 100 {
			t.Fatalf("Next(ctx, 100) after %d events = %d events, %v; want at most 100 of the %d", len(got), len(evs), err, cur.LastSeq)
		}
		for _, ev := range evs {
			if ev.Seq != int64(len(got))+1 {
				t.Fatalf("Next() gave seq %d; want %d", ev.Seq, len(got)+1)
			}
			got = append(got, ev)
		}
	}
	if n := countType(got, backends.EventMessageChunk); n != 500 {
		t.Errorf("lagging subscriber got %d chunks; want 500", n)
	}
	st := e.p.Stats()
	if st.SubscriberCatchups == 0 || st.SubscribersDrop != 0 {
		t.Errorf("Stats() catchups %d, dropped %d; want some catch-ups and no drop", st.SubscriberCatchups, st.SubscribersDrop)
	}
	if err := slow.Err(); err != nil {
		t.Errorf("Err() = %v; want nil (live)", err)
	}
}

// Closing a session ends its subscriptions with ErrClosed after
// session.closed; a subscription made later gets the stored events, then
// ErrClosed.
func TestSubscribeClosedSession(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(agenttest.Script{})}, func(c *pool.Config) { c.RingSize = 2 })
	s := e.session("fake")
	ctx := context.Background()
	e.prompt(s.ID, "", "hello")
	live, err := e.p.Subscribe(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := e.p.Close(ctx, s.ID, true); err != nil {
		t.Fatalf("Close(%s) error = %v", s.ID, err)
	}
	all, err := readAll(t, live, 0)
	if !errors.Is(err, pool.ErrClosed) || len(all) < 4 || all[len(all)-1].Type != backends.EventSessionClosed {
		t.Fatalf("live subscription read %v, %v; want every event, session.closed last, then ErrClosed", typesOf(all), err)
	}
	if err := live.Err(); !errors.Is(err, pool.ErrClosed) {
		t.Errorf("Err() = %v; want ErrClosed", err)
	}
	late, err := e.p.Subscribe(ctx, s.ID, 2)
	if err != nil {
		t.Fatalf("Subscribe(closed session) error = %v", err)
	}
	defer late.Close()
	rest, err := readAll(t, late, 2)
	if !errors.Is(err, pool.ErrClosed) || len(rest) != len(all)-2 {
		t.Errorf("late subscription after 2 read %d events, %v; want %d then ErrClosed", len(rest), err, len(all)-2)
	}
	if _, err := e.p.Subscribe(ctx, "no-such-session", 0); !errors.Is(err, pool.ErrNotFound) {
		t.Errorf("Subscribe(no-such-session) error = %v; want ErrNotFound", err)
	}
}

// The daemon-wide stream carries session events from its start on and
// ends with ErrClosed at Shutdown.
func TestSubscribeAll(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(agenttest.Script{})}, nil)
	first := e.session("fake")
	sub := e.p.SubscribeAll()
	defer sub.Close()
	s := e.session("fake")
	ev := nextOfType(t, sub, backends.EventSessionCreated)
	if ev.Session != s.ID || ev.Session == first.ID {
		t.Errorf("first session.created on the stream is of %q; want %q (made after SubscribeAll)", ev.Session, s.ID)
	}
	if err := e.p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		evs, err := sub.Next(ctx, 0)
		if err != nil {
			if !errors.Is(err, pool.ErrClosed) {
				t.Errorf("Next() after Shutdown error = %v; want ErrClosed once the stream is read", err)
			}
			break
		}
		for _, ev := range evs {
			if !strings.HasPrefix(string(ev.Type), "session.") && !strings.HasPrefix(string(ev.Type), "agent.") {
				t.Errorf("daemon-wide stream carried %s", ev.Type)
			}
		}
	}
}
