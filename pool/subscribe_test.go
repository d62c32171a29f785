package pool_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// Subscribers that join at random moments with random starting points, while
// thousands of events are published, each see every event after their
// starting point exactly once and in order.
func TestSubscribeGapFreeUnderConcurrentPublishing(t *testing.T) {
	const chunks = 3000
	flood := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: chunks}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(flood)}, func(c *pool.Config) {
		c.RingSize = 64 // most late joiners must read the store
		c.SubscriberBuffer = 1 << 16
	})
	s := e.session("fake")
	ctx := context.Background()
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
			next := after + 1
			check := func(ev backends.Event) bool {
				if ev.Seq != next {
					t.Errorf("subscriber after %d: got seq %d; want %d", after, ev.Seq, next)
					return false
				}
				next++
				return ev.Type != backends.EventTurnEnded
			}
			for _, ev := range sub.Backlog {
				if !check(ev) {
					results <- nil
					return
				}
			}
			for ev := range sub.C {
				if !check(ev) {
					results <- nil
					return
				}
			}
			t.Errorf("subscriber after %d: channel closed early: %v", after, sub.Err())
			results <- nil
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

func TestSlowSubscriberIsDropped(t *testing.T) {
	flood := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: 500}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(flood)}, func(c *pool.Config) { c.SubscriberBuffer = 16 })
	s := e.session("fake")
	slow, err := e.p.Subscribe(context.Background(), s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	e.prompt(s.ID, "", "go") // never blocked by the subscriber that does not read
	for range slow.C {
	}
	if err := slow.Err(); err != pool.ErrSlowSubscriber {
		t.Fatalf("Err() = %v; want ErrSlowSubscriber", err)
	}
	if e.p.Stats().SubscribersDrop == 0 {
		t.Error("dropped subscriber not counted")
	}
}
