package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"unsafe"
	"weak"

	"github.com/agentpool/agentpool/backends"
)

// sizedEvent returns event seq with n bytes of Data, each byte telling seq.
func sizedEvent(seq int64, n int) backends.Event {
	data := make(json.RawMessage, n)
	for i := range data {
		data[i] = byte(seq)
	}
	return backends.Event{Seq: seq, Session: "s", Type: backends.EventMessageChunk, Data: data}
}

// ringContents reads the events the ring holds, oldest to newest, and
// checks that they are every position from oldest to last and that their
// bytes are what the feed counts.
func ringContents(t *testing.T, f *Feed) []backends.Event {
	t.Helper()
	oldest, last := f.oldest.Load(), f.last.Load()
	evs := f.read(oldest, last)
	if int64(len(evs)) != last-oldest+1 {
		t.Fatalf("ring holds %d events; want positions %d..%d", len(evs), oldest, last)
	}
	var held int64
	for _, ev := range evs {
		held += eventBytes(ev)
	}
	if now, _ := f.retained(); now != held {
		t.Fatalf("feed counts %d bytes; its events hold %d", now, held)
	}
	return evs
}

// The ring holds at most its budget of bytes, dropping its oldest events
// (whole chunks, or the start of one, which it replaces), but always the
// newest event, even one bigger than the budget alone. Readers behind it
// read the backing source, gap-free and unchanged.
func TestFeedByteBudget(t *testing.T) {
	const budget = 64 << 10
	log := &memLog{}
	f := newSessionFeed(1024, budget, 0, log.read, nil)
	// Small, medium, big and bigger-than-the-budget events, in a pattern
	// that crosses chunk boundaries at many offsets.
	sizes := []int{10, 100, 3000, 20 << 10, 5, 40 << 10, 100 << 10, 7, 1000, 30 << 10, 0, 200}
	var seq int64
	for round := range 40 {
		for i := range sizes {
			seq++
			ev := sizedEvent(seq, sizes[(i+round)%len(sizes)])
			log.append(ev)
			f.Publish(ev)
			evs := ringContents(t, f)
			now, _ := f.retained()
			newest := eventBytes(ev)
			switch {
			case newest > budget && (len(evs) != 1 || now != newest):
				t.Fatalf("after seq %d of %d bytes, ring holds %d events, %d bytes; want it alone", seq, len(ev.Data), len(evs), now)
			case newest <= budget && now > budget:
				t.Fatalf("after seq %d, ring holds %d bytes; want at most %d", seq, now, budget)
			case evs[len(evs)-1].Seq != seq:
				t.Fatalf("ring's newest is seq %d; want %d", evs[len(evs)-1].Seq, seq)
			}
		}
	}
	if _, peak := f.retained(); peak > 100<<10+eventOverhead {
		t.Errorf("ring held at most %d bytes; want at most the biggest event, %d", peak, 100<<10+eventOverhead)
	}
	for _, after := range []int64{0, 1, seq / 3, seq - 20, seq - 2, seq - 1} {
		t.Run(fmt.Sprintf("after=%d", after), func(t *testing.T) {
			sub := f.Subscribe(after)
			defer sub.Close()
			want := log.evs[after:]
			got := make([]backends.Event, 0, len(want))
			for int64(len(got)) < seq-after {
				evs, err := sub.Next(testCtx(t), 0)
				if err != nil {
					t.Fatalf("Next() after %d events = %v", len(got), err)
				}
				got = append(got, evs...)
			}
			if !slices.EqualFunc(got, want, func(a, b backends.Event) bool {
				return a.Seq == b.Seq && slices.Equal(a.Data, b.Data)
			}) {
				t.Errorf("read %d events; want seqs %d..%d with their data", len(got), after+1, seq)
			}
		})
	}
}

// Neither the ring nor its readers copy an event's Data: a huge event is
// in memory once, shared with whoever else holds it (the store's queue).
func TestFeedSharesData(t *testing.T) {
	f := newSessionFeed(16, 1<<20, 0, nil, nil)
	small, huge := sizedEvent(1, 100), sizedEvent(2, 4<<20)
	f.Publish(small)
	f.Publish(huge) // alone over the budget: kept, by itself
	sub := f.Subscribe(1)
	defer sub.Close()
	evs, err := sub.Next(testCtx(t), 0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("Next() = %d events, %v; want the huge one", len(evs), err)
	}
	if unsafe.SliceData(evs[0].Data) != unsafe.SliceData(huge.Data) || len(evs[0].Data) != len(huge.Data) {
		t.Error("Next() returned a copy of the event's Data; want the published array")
	}
	if got := f.read(1, 1); len(got) != 0 {
		t.Errorf("ring still holds seq 1 beside an event over its budget")
	}
}

// The events the ring drops, for bytes or when it wraps, leave memory at
// once (no chunk keeps them), while the ones it keeps stay.
func TestFeedDroppedEventsAreFreed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ring   int
		budget int64
		keep   int // events the ring keeps at the end
	}{
		{"bytes", 1024, 1 << 20, 3}, // 3 events of 256 KiB and their slots fit in 1 MiB
		{"count", 8, 0, 16},         // a ring of 8 keeps 8 to 16 events
	} {
		t.Run(tc.name, func(t *testing.T) {
			const total = 64
			f := newStampedFeed(tc.ring, tc.budget, nil)
			ptrs := make([]weak.Pointer[byte], total)
			for i := range total {
				ev := sizedEvent(int64(i+1), 256<<10)
				ptrs[i] = weak.Make(&ev.Data[0])
				f.Publish(ev)
			}
			runtime.GC()
			runtime.GC()
			var kept []int
			for i, p := range ptrs {
				if p.Value() != nil {
					kept = append(kept, i+1)
				}
			}
			// The ring may keep fewer than tc.keep (dropping in steps), never others.
			if len(kept) == 0 || len(kept) > tc.keep || kept[len(kept)-1] != total || kept[0] != total-len(kept)+1 {
				t.Errorf("events whose Data is still in memory: %v; want at most the newest %d", kept, tc.keep)
			}
			runtime.KeepAlive(f)
		})
	}
}

// A reader behind the ring asks its backing source for as many events as
// fit in about maxBackingBytes at the size of the events it reads, not a
// fixed number whatever their size.
func TestFeedCatchUpBatchesByBytes(t *testing.T) {
	const total, size = 200, 128 << 10
	log := &memLog{}
	var limits []int
	backing := func(ctx context.Context, after int64, limit int) ([]backends.Event, error) {
		limits = append(limits, limit) // one reader: no lock needed
		return log.read(ctx, after, limit)
	}
	f := newSessionFeed(4096, 1<<20, 0, backing, nil)
	for seq := int64(1); seq <= total; seq++ {
		ev := sizedEvent(seq, size)
		log.append(ev)
		f.Publish(ev)
	}
	sub := f.Subscribe(0)
	defer sub.Close()
	seqs, err := func() ([]int64, error) {
		var seqs []int64
		for len(seqs) < total {
			evs, err := sub.Next(testCtx(t), 0)
			if err != nil {
				return seqs, err
			}
			for _, ev := range evs {
				seqs = append(seqs, ev.Seq)
			}
		}
		return seqs, nil
	}()
	if err != nil || !slices.Equal(seqs, seqRange(1, total)) {
		t.Fatalf("read %d events, then %v; want 1..%d", len(seqs), err, total)
	}
	want := int(maxBackingBytes / (size + eventOverhead))
	if len(limits) == 0 || slices.Max(limits) > want+1 {
		t.Errorf("backing source asked for %v events at a time; want at most about %d (%d bytes of %d-byte events)", limits, want, maxBackingBytes, size)
	}
}

// On a feed without backing (the daemon-wide stream), a reader that the
// byte budget leaves behind is dropped; one that keeps up reads all.
func TestStampedFeedByteBudgetDropsLaggingReader(t *testing.T) {
	var dropped atomic.Int64
	f := newStampedFeed(1024, 64<<10, &dropped)
	slow, fast := f.subscribeNow(), f.subscribeNow()
	defer slow.Close()
	defer fast.Close()
	ctx := testCtx(t)
	var read int
	for seq := int64(1); seq <= 40; seq++ {
		f.Publish(sizedEvent(seq, 10<<10))
		evs, err := fast.Next(ctx, 0)
		if err != nil || len(evs) != 1 {
			t.Fatalf("fast reader's Next() = %d events, %v; want 1", len(evs), err)
		}
		read++
	}
	if _, err := slow.Next(ctx, 0); !errors.Is(err, ErrSlowSubscriber) {
		t.Errorf("Next() of a reader 400 KiB behind a 64 KiB ring = %v; want ErrSlowSubscriber", err)
	}
	if dropped.Load() != 1 || read != 40 {
		t.Errorf("dropped %d readers, the other read %d events; want 1 and 40", dropped.Load(), read)
	}
}

// dropRing lets go of the ring of a closed feed with a backing source,
// even while a subscription that has not read it is open: that one then
// reads the backing source, and ends as it would have.
func TestFeedDropRing(t *testing.T) {
	log := &memLog{}
	f := newSessionFeed(64, 0, 0, log.read, nil)
	ptrs := make([]weak.Pointer[byte], 10)
	for i := range ptrs {
		ev := sizedEvent(int64(i+1), 64<<10)
		ptrs[i] = weak.Make(&ev.Data[0])
		log.append(sizedEvent(ev.Seq, len(ev.Data))) // the store's copy
		f.Publish(ev)
	}
	sub := f.Subscribe(0)
	defer sub.Close()
	f.Close(nil)
	f.dropRing()
	if now, _ := f.retained(); now != 0 {
		t.Errorf("ring holds %d bytes after dropRing; want 0", now)
	}
	runtime.GC()
	runtime.GC()
	for i, p := range ptrs {
		if p.Value() != nil {
			t.Errorf("Data of seq %d is in memory after dropRing", i+1)
		}
	}
	seqs, err := drain(t, sub, 0)
	if !errors.Is(err, ErrClosed) || !slices.Equal(seqs, seqRange(1, 10)) {
		t.Errorf("subscription read %v, then %v; want 1..10 from the store, then ErrClosed", seqs, err)
	}
}
