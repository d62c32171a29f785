package pool_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// heapAfterGC returns the live heap once garbage is collected. The second
// cycle empties what sync.Pools kept through the first (their victim
// caches).
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heapSampler records every few milliseconds, until stop is called, which
// returns them, the highest heap in use (garbage not yet collected
// included, as HeapAlloc) and the highest live heap (marked by the last
// collection).
func heapSampler() (stop func() (inUse, live uint64)) {
	done := make(chan struct{})
	var inUse, live uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
		for {
			metrics.Read(samples)
			inUse = max(inUse, samples[0].Value.Uint64())
			live = max(live, samples[1].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() (uint64, uint64) {
		close(done)
		wg.Wait()
		return inUse, live
	}
}

// readBig reads sub until an event for which stop (if not nil) is true,
// or until Next fails, checking that seqs follow after+1, after+2, ...; it
// returns how many chunks of at least size bytes it read and Next's error
// (nil when it stopped). It keeps no event.
func readBig(ctx context.Context, sub *pool.Subscription, after int64, stop func(backends.Event) bool, size int) (int, error) {
	big, next := 0, after+1
	for {
		evs, err := sub.Next(ctx, 0)
		if err != nil {
			return big, err
		}
		for _, ev := range evs {
			if ev.Seq != next {
				return big, fmt.Errorf("seq %d where %d was due", ev.Seq, next)
			}
			next++
			if ev.Type == backends.EventMessageChunk && len(ev.Data) >= size {
				big++
			}
			if stop != nil && stop(ev) {
				return big, nil
			}
		}
	}
}

// Two sessions whose agent sends 200 updates of 1 MiB each keep at most
// their ring's byte budget in memory during the flood; a reader that keeps
// up and one that starts from the first event (reading the store) get
// every update in order; once both sessions are closed, their sessions,
// feeds and rings leave memory and the heap is back near its idle figure.
// A closed session is still readable: it is loaded again from the store,
// and not kept.
//
// The heap after close may exceed the idle figure by 20% plus 4 MiB. The
// slack covers what the first big turn leaves for good whatever the number
// of sessions (type caches of encoding/json and sqlx, grown structures of
// the runtime and the store: about 0.3 MiB measured) and GC timing, and is
// below what one ring holds at the end of the flood (over 6 MiB), so that
// a single leaked ring fails the test.
func TestHugeUpdatesMemoryIsBoundedAndFreedAtClose(t *testing.T) {
	if testing.Short() {
		t.Skip("sends hundreds of MiB of updates")
	}
	// 200 MiB per session; 32 under the race detector, still four rings' worth.
	const size = 1 << 20
	updates := 200
	if raceDetector {
		updates = 32
	}
	steps := make([]agenttest.Step, updates)
	for i := range steps {
		steps[i] = agenttest.Step{BigLine: size}
	}
	script := agenttest.Script{Turns: []agenttest.Turn{{Steps: steps}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(script)}, nil) // the default RingBytes
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sessions := []pool.Session{e.session("fake"), e.session("fake")}
	idle := heapAfterGC()
	stopSampler := heapSampler()

	var wg sync.WaitGroup
	for _, s := range sessions {
		// Still open when the heap is measured after close, as a client
		// that has not yet read the end of the stream: it pins no event.
		live, err := e.p.Subscribe(ctx, s.ID, s.LastSeq)
		if err != nil {
			t.Fatal(err)
		}
		defer live.Close()
		wg.Add(2)
		go func() {
			defer wg.Done()
			tn, err := e.p.Prompt(ctx, pool.PromptRequest{Session: s.ID, Text: "flood"})
			if err != nil || tn.StopReason != "end_turn" {
				t.Errorf("Prompt(%s) = %+v, %v; want end_turn", s.ID, tn, err)
			}
		}()
		go func() {
			defer wg.Done()
			ended := func(ev backends.Event) bool { return ev.Type == backends.EventTurnEnded }
			if n, err := readBig(ctx, live, s.LastSeq, ended, size); err != nil || n != updates {
				t.Errorf("live reader of %s read %d updates of 1 MiB, %v; want %d", s.ID, n, err, updates)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, s := range sessions {
		now, peak, ok := e.p.RingRetained(s.ID)
		if !ok || peak > pool.DefaultRingBytes || now > pool.DefaultRingBytes {
			t.Errorf("ring of %s holds %d bytes, at most %d (loaded %v); want at most %d", s.ID, now, peak, ok, pool.DefaultRingBytes)
		}
		t.Logf("ring of %s: %d bytes now, %d at most (budget %d)", s.ID, now, peak, pool.DefaultRingBytes)
	}
	if now, peak := e.p.GlobalRingRetained(); peak > 8<<20 {
		t.Errorf("daemon-wide ring holds %d bytes, at most %d; want at most 8 MiB", now, peak)
	}
	// A reader from the first event reads the flood from the store, then
	// the ring, in order.
	first := sessions[0]
	cur, err := e.p.Get(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	late, err := e.p.Subscribe(ctx, first.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := func(ev backends.Event) bool { return ev.Seq >= cur.LastSeq }
	if n, err := readBig(ctx, late, 0, last, size); err != nil || n != updates {
		t.Errorf("reader from seq 0 of %s read %d updates of 1 MiB, %v; want %d", first.ID, n, err, updates)
	}
	late.Close()
	peak, peakLive := stopSampler()

	for _, s := range sessions {
		if _, err := e.p.Close(ctx, s.ID, true); err != nil {
			t.Fatalf("Close(%s) = %v", s.ID, err)
		}
		if _, _, ok := e.p.RingRetained(s.ID); ok {
			t.Errorf("session %s is still in memory after Close", s.ID)
		}
	}
	again, err := e.p.Subscribe(ctx, first.ID, 0)
	if err != nil {
		t.Fatalf("Subscribe(closed %s) = %v", first.ID, err)
	}
	if n, err := readBig(ctx, again, 0, nil, size); !errors.Is(err, pool.ErrClosed) || n != updates {
		t.Errorf("reader of closed %s read %d updates of 1 MiB, then %v; want %d, then ErrClosed", first.ID, n, err, updates)
	}
	again.Close()
	if got, err := e.p.Get(ctx, first.ID); err != nil || got.Status != pool.StatusClosed {
		t.Errorf("Get(closed %s) = status %q, %v; want it closed", first.ID, got.Status, err)
	}
	if n := e.p.Stats().Sessions; n != 0 {
		t.Errorf("Stats().Sessions = %d after closing both; want 0", n)
	}
	after := heapAfterGC()
	const mib = 1 << 20
	t.Logf("heap: idle %.1f MiB; during the flood at most %.1f MiB in use, %.1f MiB live; after close %.1f MiB",
		float64(idle)/mib, float64(peak)/mib, float64(peakLive)/mib, float64(after)/mib)
	if limit := idle + idle/5 + 4*mib; after > limit {
		t.Errorf("heap after closing both sessions = %.1f MiB; want at most %.1f MiB (idle %.1f MiB + 20%% + 4 MiB)",
			float64(after)/mib, float64(limit)/mib, float64(idle)/mib)
	}
}
