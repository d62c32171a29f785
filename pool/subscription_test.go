package pool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Next returns the context's error when it ends, waiting or not.
func TestFeedNextHonoursContext(t *testing.T) {
	f := NewFeed(8, nil)
	sub := f.Subscribe(0)
	defer sub.Close()
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan error, 1)
	go func() {
		_, err := sub.Next(ctx, 0)
		got <- err
	}()
	time.Sleep(time.Millisecond)
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Errorf("Next() when ctx is cancelled = %v; want context.Canceled", err)
	}
	f.Publish(backends.Event{Seq: 1})
	if evs, err := sub.Next(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Next(cancelled ctx) with an event ready = %v, %v; want context.Canceled", evs, err)
	}
	tctx, tcancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer tcancel()
	if evs, err := sub.Next(tctx, 0); err != nil || len(evs) != 1 {
		t.Fatalf("Next() = %v, %v; want the event", evs, err)
	}
	if _, err := sub.Next(tctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Next() past the deadline = %v; want context.DeadlineExceeded", err)
	}
	if err := sub.Err(); err != nil {
		t.Errorf("Err() after a cancelled Next = %v; want nil (still live)", err)
	}
}

// isClosed says whether c is closed, without waiting.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Ready fires when events arrive and when the subscription ends, and a
// select on it can go on with other work meanwhile.
func TestFeedReady(t *testing.T) {
	f := NewFeed(8, nil)
	sub := f.Subscribe(0)
	other := f.Subscribe(0)
	defer other.Close()
	ctx := testCtx(t)
	r := sub.Ready()
	if isClosed(r) {
		t.Fatal("Ready() of an empty feed is closed")
	}
	f.Publish(backends.Event{Seq: 1})
	if !isClosed(r) || !isClosed(sub.Ready()) {
		t.Fatal("Ready() not closed after Publish")
	}
	if evs, err := sub.Next(ctx, 0); err != nil || len(evs) != 1 {
		t.Fatalf("Next() = %v, %v", evs, err)
	}
	r = sub.Ready()
	if isClosed(r) {
		t.Fatal("Ready() closed with nothing left to read")
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	published := make(chan struct{})
	go func() {
		defer close(published)
		time.Sleep(5 * time.Millisecond)
		f.Publish(backends.Event{Seq: 2})
	}()
	defer func() { <-published }()
	for done := false; !done; {
		select {
		case <-tick.C: // a heartbeat would go here
		case <-r:
			done = true
		case <-ctx.Done():
			t.Fatal("Ready() never fired after Publish")
		}
	}
	if evs, err := sub.Next(ctx, 0); err != nil || len(evs) != 1 || evs[0].Seq != 2 {
		t.Fatalf("Next() after Ready = %v, %v; want seq 2", evs, err)
	}
	r = sub.Ready()
	sub.Close()
	if !isClosed(r) || !isClosed(sub.Ready()) {
		t.Error("Ready() not closed after Close")
	}
	if _, err := sub.Next(ctx, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Next() after Close = %v; want ErrClosed", err)
	}
	r = other.Ready() // has events 1 and 2
	if !isClosed(r) {
		t.Error("Ready() of a subscription with events to read is not closed")
	}
}

// The daemon-wide feed numbers events itself (they carry other sessions'
// seqs), starts a subscription at the present, and ends one that falls
// behind its ring with ErrSlowSubscriber, counted once; the others go on.
func TestStampedFeedDropsLaggingReader(t *testing.T) {
	var dropped atomic.Int64
	f := newStampedFeed(4, 0, &dropped)
	f.Publish(backends.Event{Session: "old", Seq: 40})
	slow, fast := f.subscribeNow(), f.subscribeNow()
	defer slow.Close()
	defer fast.Close()
	ctx := testCtx(t)
	in := []backends.Event{{Session: "a", Seq: 7}, {Session: "b", Seq: 3}, {Session: "a", Seq: 8}}
	for _, ev := range in {
		f.Publish(ev)
	}
	evs, err := slow.Next(ctx, 0)
	if err != nil || len(evs) != len(in) {
		t.Fatalf("Next() = %v, %v; want %v", evs, err, in)
	}
	for i, ev := range evs {
		if ev.Session != in[i].Session || ev.Seq != in[i].Seq {
			t.Errorf("event %d = %s/%d; want %s/%d", i, ev.Session, ev.Seq, in[i].Session, in[i].Seq)
		}
	}
	if evs, err := fast.Next(ctx, 0); err != nil || len(evs) != len(in) {
		t.Fatalf("fast reader Next() = %v, %v; want %d events", evs, err, len(in))
	}
	for i := range 10 {
		f.Publish(backends.Event{Session: "c", Seq: int64(i + 1)})
		if evs, err := fast.Next(ctx, 0); err != nil || len(evs) != 1 {
			t.Fatalf("fast reader Next() = %v, %v", evs, err)
		}
	}
	for range 2 {
		if _, err := slow.Next(ctx, 0); !errors.Is(err, ErrSlowSubscriber) {
			t.Fatalf("Next() of a reader 10 behind a ring of 4 = %v; want ErrSlowSubscriber", err)
		}
	}
	if err := slow.Err(); !errors.Is(err, ErrSlowSubscriber) {
		t.Errorf("Err() = %v; want ErrSlowSubscriber", err)
	}
	if n := dropped.Load(); n != 1 {
		t.Errorf("dropped = %d; want 1", n)
	}
	if err := fast.Err(); err != nil {
		t.Errorf("fast reader Err() = %v; want nil", err)
	}
}

// Close of a subscription while its reader waits in Next ends that Next
// at once; another waiting reader keeps waiting and gets the next event.
func TestSubscriptionCloseWhileWaiting(t *testing.T) {
	f := NewFeed(8, nil)
	sub, other := f.Subscribe(0), f.Subscribe(0)
	defer other.Close()
	ctx := testCtx(t)
	got, otherGot := make(chan error, 1), make(chan []backends.Event, 1)
	go func() {
		_, err := sub.Next(ctx, 0)
		got <- err
	}()
	go func() {
		evs, _ := other.Next(ctx, 0)
		otherGot <- evs
	}()
	time.Sleep(time.Millisecond)
	sub.Close()
	sub.Close() // idempotent
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Next() when its subscription closes = %v; want ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("Next() still waiting after Close")
	}
	if err := sub.Err(); !errors.Is(err, ErrClosed) {
		t.Errorf("Err() after Close = %v; want ErrClosed", err)
	}
	select {
	case evs := <-otherGot:
		t.Fatalf("the other reader returned %v before any event", evs)
	case <-time.After(5 * time.Millisecond):
	}
	f.Publish(backends.Event{Seq: 1})
	if evs := <-otherGot; len(evs) != 1 || evs[0].Seq != 1 {
		t.Errorf("the other reader got %v; want seq 1", evs)
	}
}
