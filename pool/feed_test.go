package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// memLog is a backing source: the events published so far, held in
// memory. append must happen before the feed's Publish, as the pool queues
// an event to the store before publishing it.
type memLog struct {
	mu    sync.Mutex
	evs   []backends.Event // by seq
	reads atomic.Int64
	fail  error // returned by read while set
}

func (l *memLog) append(ev backends.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

func (l *memLog) read(ctx context.Context, after int64, limit int) ([]backends.Event, error) {
	l.reads.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return nil, l.fail
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	i := sort.Search(len(l.evs), func(i int) bool { return l.evs[i].Seq > after })
	rest := l.evs[i:]
	if len(rest) > limit {
		rest = rest[:limit]
	}
	return append([]backends.Event(nil), rest...), nil
}

// publisher publishes numbered events to a feed and its log.
type publisher struct {
	mu  sync.Mutex
	seq int64
	f   *Feed
	log *memLog
	// data, if set, is the most bytes of Data an event gets (a random
	// number of them, from 0).
	data int
}

func (p *publisher) publish() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	ev := backends.Event{Seq: p.seq, Session: "s", Type: backends.EventMessageChunk, Time: time.Now()}
	if p.data > 0 {
		ev.Data = make(json.RawMessage, rand.IntN(p.data+1))
	}
	if p.log != nil {
		p.log.append(ev)
	}
	p.f.Publish(ev)
	return p.seq
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// drain reads sub until Next fails and returns the seqs read and the error.
func drain(t *testing.T, sub *Subscription, limit int) ([]int64, error) {
	t.Helper()
	ctx := testCtx(t)
	var seqs []int64
	for {
		evs, err := sub.Next(ctx, limit)
		if err != nil {
			return seqs, err
		}
		if len(evs) == 0 || (limit > 0 && len(evs) > limit) {
			t.Fatalf("Next(ctx, %d) returned %d events", limit, len(evs))
		}
		for _, ev := range evs {
			seqs = append(seqs, ev.Seq)
		}
	}
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// Readers joining at random cursors while several goroutines publish get
// every event after their cursor once and in order, from the ring (across
// its chunks) or, being behind it, from the backing source.
//
// With a byte budget, events of random sizes make the ring drop its oldest
// events in the middle of chunks, which it replaces while readers read them.
func TestFeedGapFreeUnderConcurrentPublishing(t *testing.T) {
	for _, tc := range []struct {
		ring         int
		budget, data int
	}{{8, 0, 0}, {300, 0, 0}, {300, 16 << 10, 1 << 10}, {4096, 64 << 10, 4 << 10}} {
		t.Run(fmt.Sprintf("ring=%d,bytes=%d", tc.ring, tc.budget), func(t *testing.T) {
			testFeedGapFree(t, tc.ring, int64(tc.budget), tc.data)
		})
	}
}

func testFeedGapFree(t *testing.T, ring int, budget int64, data int) {
	const total, readers = 5000, 16
	var catchups atomic.Int64
	log := &memLog{}
	f := newSessionFeed(ring, budget, 0, log.read, &catchups)
	pub := &publisher{f: f, log: log, data: data}
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pub.publish() < total {
				if rand.IntN(64) == 0 {
					time.Sleep(time.Microsecond)
				}
			}
		}()
	}
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			pub.mu.Lock()
			after := rand.Int64N(pub.seq + 1)
			pub.mu.Unlock()
			sub := f.Subscribe(after)
			defer sub.Close()
			limit := rand.IntN(20) // 0: all available
			next := after + 1
			for next <= total {
				if r%2 == 0 { // half wait in a select, as the SSE loop does
					select {
					case <-sub.Ready():
					case <-ctx.Done():
						t.Errorf("reader after %d: Ready never fired after seq %d", after, next-1)
						return
					}
				}
				evs, err := sub.Next(ctx, limit)
				if err != nil {
					t.Errorf("reader after %d: Next() after seq %d error = %v", after, next-1, err)
					return
				}
				if len(evs) == 0 || (limit > 0 && len(evs) > limit) {
					t.Errorf("Next(ctx, %d) returned %d events", limit, len(evs))
					return
				}
				for _, ev := range evs {
					if ev.Seq != next {
						t.Errorf("reader after %d: got seq %d; want %d", after, ev.Seq, next)
						return
					}
					next++
				}
			}
		}()
	}
	wg.Wait()
	// More publishers than needed overshoot total by at most their number.
	if n := pub.seq; n < total || n > total+4 {
		t.Fatalf("published %d events; want %d", n, total)
	}
	if catchups.Load() != log.reads.Load() || ((ring < 16 || budget > 0) && catchups.Load() == 0) {
		t.Errorf("catch-ups counted %d, backing reads %d; want the same (above 0 with a tiny ring)", catchups.Load(), log.reads.Load())
	}
	if budget > 0 {
		if now, peak := f.retained(); now > budget || peak > budget {
			t.Errorf("ring holds %d bytes, at most %d; want at most the budget, %d", now, peak, budget)
		}
	}
}

// A reader that never reads costs the publisher nothing: publishing goes
// on, allocates nothing per event whatever the number of subscriptions,
// and memory stays bounded by the ring. The reader then reads it all.
func TestFeedStuckReaderDoesNotBlockPublishing(t *testing.T) {
	const ring, total = 64, 100_000
	log := &memLog{}
	f := newSessionFeed(ring, 0, 0, log.read, nil)
	stuck := f.Subscribe(0)
	defer stuck.Close()
	for range 99 {
		defer f.Subscribe(0).Close()
	}
	pub := &publisher{f: f} // the log is filled below, outside the measure
	for pub.seq < total {
		pub.publish()
	}
	slots := 0
	for i := range f.table {
		if c := f.table[i].Load(); c != nil {
			slots += int(f.csize)
		}
	}
	if slots < ring || slots > 2*ring {
		t.Errorf("ring holds %d slots after %d publishes; want %d to %d", slots, total, ring, 2*ring)
	}
	// One chunk per f.csize events, whatever the number of subscriptions.
	ev := backends.Event{Type: backends.EventMessageChunk}
	publishChunk := func() {
		for range f.csize {
			pub.seq++
			ev.Seq = pub.seq
			f.Publish(ev)
		}
	}
	if n := testing.AllocsPerRun(100, publishChunk); n != 1 {
		t.Errorf("Publish of %d events with 100 idle subscriptions allocates %v times; want 1 (a chunk)", f.csize, n)
	}
	for s := int64(1); s <= pub.seq; s++ {
		log.append(backends.Event{Seq: s})
	}
	f.Close(nil)
	seqs, err := drain(t, stuck, 0)
	if !errors.Is(err, ErrClosed) || !slices.Equal(seqs, seqRange(1, pub.seq)) {
		t.Errorf("stuck reader read %d events (first %v), then %v; want 1..%d then ErrClosed", len(seqs), seqs[:min(len(seqs), 3)], err, pub.seq)
	}
}

// Close lets every subscription read what was published before it, then
// ends it with the given error; later publishes are not delivered.
func TestFeedCloseDeliversEverythingThenError(t *testing.T) {
	errGone := errors.New("gone")
	for _, tc := range []struct {
		name    string
		ring    int
		backing bool
		limit   int
		closeE  error
		wantE   error
		want    []int64
	}{
		{"ring holds all", 16, false, 3, nil, ErrClosed, seqRange(1, 10)},
		{"behind ring, backing", 4, true, 0, errGone, errGone, seqRange(1, 10)},
		{"behind ring, backing, limited", 4, true, 3, ErrClosed, ErrClosed, seqRange(1, 10)},
		{"behind ring, no backing", 4, false, 0, ErrClosed, ErrSlowSubscriber, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &memLog{}
			var dropped atomic.Int64
			f := NewFeed(tc.ring, nil)
			f.dropped = &dropped
			if tc.backing {
				f.backing = log.read
			}
			pub := &publisher{f: f, log: log}
			sub := f.Subscribe(0)
			defer sub.Close()
			waiter := f.Subscribe(0) // waits in Next when Close comes
			defer waiter.Close()
			for range 10 {
				pub.publish()
			}
			if tc.wantE == ErrSlowSubscriber {
				if _, err := waiter.Next(testCtx(t), 0); !errors.Is(err, ErrSlowSubscriber) {
					t.Fatalf("Next() 10 behind a ring of 4 without backing = %v; want ErrSlowSubscriber", err)
				}
				if dropped.Load() != 1 {
					t.Errorf("dropped = %d; want 1", dropped.Load())
				}
			}
			for n := 0; n < 10 && tc.wantE != ErrSlowSubscriber; { // read all: the next Next waits
				evs, err := waiter.Next(testCtx(t), 0)
				if err != nil {
					t.Fatalf("Next() before Close = %v", err)
				}
				n += len(evs)
			}
			got := make(chan error, 1)
			go func() {
				_, err := waiter.Next(testCtx(t), 0)
				got <- err
			}()
			time.Sleep(time.Millisecond) // let it wait, mostly
			f.Close(tc.closeE)
			f.Close(errors.New("second")) // ignored
			pub.publish()                 // after Close: not delivered
			seqs, err := drain(t, sub, tc.limit)
			if !slices.Equal(seqs, tc.want) || !errors.Is(err, tc.wantE) {
				t.Errorf("read %v, then %v; want %v, then %v", seqs, err, tc.want, tc.wantE)
			}
			if err := sub.Err(); !errors.Is(err, tc.wantE) {
				t.Errorf("Err() = %v; want %v", err, tc.wantE)
			}
			if tc.wantE == ErrSlowSubscriber {
				return // the waiter was dropped too, before Close
			}
			if err := <-got; !errors.Is(err, tc.wantE) {
				t.Errorf("Next() waiting at Close = %v; want %v", err, tc.wantE)
			}
		})
	}
}

// A failed read of the backing source is returned and the subscription
// stays usable; Publish ignores stale seqs and restarts the ring at a gap;
// batches belong to the caller.
func TestFeedBackingAndSeqs(t *testing.T) {
	log := &memLog{}
	var catchups atomic.Int64
	f := newSessionFeed(4, 0, 0, log.read, &catchups)
	pub := &publisher{f: f, log: log}
	for range 10 {
		pub.publish()
	}
	sub := f.Subscribe(2)
	defer sub.Close()
	ctx := testCtx(t)
	boom := errors.New("disk on fire")
	log.mu.Lock()
	log.fail = boom
	log.mu.Unlock()
	if _, err := sub.Next(ctx, 0); !errors.Is(err, boom) {
		t.Fatalf("Next() with a failing backing = %v; want it wrapped", err)
	}
	log.mu.Lock()
	log.fail = nil
	log.mu.Unlock()
	evs, err := sub.Next(ctx, 0)
	if err != nil || len(evs) != 8 || evs[0].Seq != 3 || evs[7].Seq != 10 {
		t.Fatalf("Next() after the backing recovered = %v, %v; want 3..10", evs, err)
	}
	f.Publish(backends.Event{Seq: 10, Type: "stale"})
	f.Publish(backends.Event{Seq: 5, Type: "stale"})
	if r := sub.Ready(); isClosed(r) {
		t.Error("stale Publish made events available")
	}
	again := f.Subscribe(6)
	defer again.Close()
	evs, err = again.Next(ctx, 0)
	if err != nil || len(evs) != 4 || evs[0].Seq != 7 || evs[3].Type == "stale" {
		t.Fatalf("Next() from the ring = %v, %v; want 7..10, none stale", evs, err)
	}
	evs[0].Type = "scribbled" // the caller's: no other reader sees it
	third := f.Subscribe(6)
	defer third.Close()
	if evs, err := third.Next(ctx, 1); err != nil || len(evs) != 1 || evs[0].Type != backends.EventMessageChunk {
		t.Fatalf("Next() of another reader = %v, %v; want seq 7 as published", evs, err)
	}
	// A gap: 11..14 never published; the ring restarts at 15.
	pub.mu.Lock()
	pub.seq = 14
	pub.mu.Unlock()
	pub.publish()
	if evs, err := sub.Next(ctx, 0); err != nil || len(evs) != 1 || evs[0].Seq != 15 {
		t.Fatalf("Next() across a gap = %v, %v; want seq 15", evs, err)
	}
	// Events the backing lacks altogether are skipped, not waited for.
	f.Publish(backends.Event{Seq: 20})
	if evs, err := sub.Next(ctx, 0); err != nil || len(evs) != 1 || evs[0].Seq != 20 {
		t.Fatalf("Next() across a gap the backing lacks = %v, %v; want seq 20", evs, err)
	}
	if catchups.Load() != log.reads.Load() || catchups.Load() != 4 {
		t.Errorf("catch-ups = %d, backing reads = %d; want 4 of each", catchups.Load(), log.reads.Load())
	}
}

// BenchmarkFeedPublish publishes b.N events to a feed that 0 or 100
// readers follow, each taking what is available in one Next. One op is one
// event published and read by every reader; it reports the readers' mean
// batch.
//
//	go test -run '^$' -bench FeedPublish -benchtime 100000x -count 3 ./pool/
func BenchmarkFeedPublish(b *testing.B) {
	for _, readers := range []int{0, 100} {
		b.Run(fmt.Sprintf("readers=%d", readers), func(b *testing.B) {
			f := NewFeed(b.N+1, nil) // nobody falls out of the ring
			ctx := b.Context()
			var wg sync.WaitGroup
			var batches atomic.Int64
			for range readers {
				sub := f.Subscribe(0)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer sub.Close()
					for n := 0; n < b.N; {
						evs, err := sub.Next(ctx, 0)
						if err != nil {
							b.Errorf("Next() error = %v", err)
							return
						}
						n += len(evs)
						batches.Add(1)
					}
				}()
			}
			ev := backends.Event{Session: "s", Type: backends.EventMessageChunk}
			b.ResetTimer()
			for i := range b.N {
				ev.Seq = int64(i + 1)
				f.Publish(ev)
			}
			wg.Wait()
			b.StopTimer()
			if readers > 0 {
				b.ReportMetric(float64(b.N*readers)/float64(batches.Load()), "events/batch")
			}
		})
	}
}
