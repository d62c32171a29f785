package acp

import (
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// The filter waits for room once maxQueuedEvents updates are queued, so a
// fast agent never runs further ahead of delivery than that; close frees it.
func TestEventQueueBounded(t *testing.T) {
	var q eventQueue
	q.init()
	const n = 20 * maxQueuedEvents
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			q.push(backends.Event{Seq: int64(i + 1)}, false)
		}
	}()
	next, peak := int64(1), 0
	for next <= n {
		evs, ok := q.take()
		if !ok {
			t.Fatal("take() = closed; want events")
		}
		peak = max(peak, len(evs))
		for _, it := range evs {
			if it.ev.Seq != next {
				t.Fatalf("took seq %d; want %d", it.ev.Seq, next)
			}
			next++
		}
		q.markDelivered(len(evs))
		time.Sleep(50 * time.Microsecond) // a slow delivery
	}
	wg.Wait()
	if peak > maxQueuedEvents {
		t.Fatalf("a take returned %d events; want at most %d queued", peak, maxQueuedEvents)
	}

	// A push blocked on a full queue returns at close.
	for range maxQueuedEvents {
		q.push(backends.Event{}, false)
	}
	done := make(chan struct{})
	go func() { q.push(backends.Event{}, false); close(done) }()
	select {
	case <-done:
		t.Fatal("push into a full queue returned before room or close")
	case <-time.After(20 * time.Millisecond):
	}
	q.close()
	<-done
}
