package wiring

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPushesCoalesce: the pushes of one session run one at a time, the
// checkpoints taken while one runs making one more push, not one each;
// Wait returns once the session's pushes are done, WaitAll once all are.
func TestPushesCoalesce(t *testing.T) {
	q := NewPushes()
	var running, most, runs atomic.Int32
	release := make(chan struct{})
	push := func() {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		runs.Add(1)
		<-release
		running.Add(-1)
	}
	q.start("s1", push)
	for range 5 {
		q.start("s1", push) // while the first runs: one more push
	}
	q.start("s2", push)
	var wg sync.WaitGroup
	wg.Add(1)
	waited := make(chan error, 1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		waited <- q.Wait(ctx, "s1")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if err := q.Wait(ctx, "s1"); err == nil {
		t.Error("Wait returned while the push ran")
	}
	cancel()
	close(release)
	wg.Wait()
	if err := <-waited; err != nil {
		t.Fatalf("Wait() = %v", err)
	}
	if err := q.WaitAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 3 || most.Load() > 2 {
		t.Errorf("%d pushes ran, at most %d at once; want 3 (two of s1, one of s2), one per session at a time", runs.Load(), most.Load())
	}
	var nilQ *Pushes
	if err := nilQ.Wait(context.Background(), "s1"); err != nil {
		t.Errorf("Wait of no Pushes = %v", err)
	}
}
