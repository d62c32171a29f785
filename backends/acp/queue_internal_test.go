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

// The filter also waits for room once maxQueuedBytes of updates are
// queued or being delivered: an agent sending 1 MiB updates is held about
// 4 MiB ahead of a delivery that is stuck (a store waiting for the disk),
// not 256 updates of 1 MiB, and each update's bytes come back once it is
// delivered.
func TestEventQueueBoundedByBytes(t *testing.T) {
	var q eventQueue
	q.init()
	const size, n, budget = 1 << 20, 40, 4 << 20
	var pushed sync.WaitGroup
	pushed.Add(1)
	go func() {
		defer pushed.Done()
		for i := range n {
			q.push(backends.Event{Seq: int64(i + 1), Data: make([]byte, size)}, false)
		}
	}()
	// Nothing is delivered yet: the filter stops at the budget.
	time.Sleep(50 * time.Millisecond)
	if got := q.pushedCount(); got*size > budget+size {
		t.Errorf("%d updates of 1 MiB queued while nothing is delivered; want at most %d MiB and one", got, budget>>20)
	}
	next := int64(1)
	for next <= n {
		evs, ok := q.take()
		if !ok {
			t.Fatal("take() = closed; want events")
		}
		for _, it := range evs {
			if it.ev.Seq != next {
				t.Fatalf("took seq %d; want %d", it.ev.Seq, next)
			}
			next++
			time.Sleep(time.Millisecond) // a slow delivery
			q.free(cap(it.ev.Data))
		}
		q.markDelivered(len(evs))
	}
	pushed.Wait()
	q.mu.Lock()
	now, peak := q.bytes, q.peak
	q.mu.Unlock()
	if now != 0 || peak > budget+size {
		t.Errorf("queue bytes: %d now, %d at most; want 0 now and at most %d", now, peak, budget+size)
	}
}
