package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// A session sending a few small events finds room in the write queue
// while another fills it with big ones: the flooding session waits at
// QueueBytes, the light one goes on up to the hard bound.
func TestLightSessionFindsRoomWhileAnotherFloods(t *testing.T) {
	const size = 1 << 20
	ctx := context.Background()
	s, _ := openTest(t, fastRetry(""))
	mustSession(t, s, "flood")
	mustSession(t, s, "light")
	release := lockDB(t, s.cfg.Path) // nothing is written: the queue fills
	seq := int64(0)
	for {
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := s.WaitRoom(wctx, "flood")
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("WaitRoom(flood) = %v", err)
			}
			break
		}
		seq++
		s.Append(bigEvent("flood", seq, size))
		if seq > 64 {
			t.Fatal("the flooding session was never held back")
		}
	}
	if held, _ := s.queue.held(); held < s.cfg.QueueBytes {
		t.Fatalf("the flood was held back at %d bytes, below QueueBytes %d", held, s.cfg.QueueBytes)
	}
	for i := int64(1); i <= 20; i++ {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.WaitRoom(wctx, "light")
		cancel()
		if err != nil {
			t.Fatalf("WaitRoom(light) for its event %d while the flood fills the queue = %v; want room", i, err)
		}
		s.Append(testEvent("light", i, time.Now()))
	}
	// A light session that has sent its share waits like the others.
	s.Append(bigEvent("light", 21, size))
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := s.WaitRoom(wctx, "light"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitRoom(light) after it queued 1 MiB = %v; want to wait", err)
	}
	cancel()
	release()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Dropped != 0 || st.Appended != seq+21 {
		t.Errorf("stats = %+v; want %d appended, none dropped", st, seq+21)
	}
}

// A turn's row that a session waits for is written in a transaction of
// its own before megabytes of another session's events taken with it,
// and each session's items keep their order.
func TestWaitedWriteOvertakesAnotherSessionsBigEvents(t *testing.T) {
	const size = 1 << 20
	ctx := context.Background()
	cfg := fastRetry("")
	cfg.FlushInterval = 5 * time.Second // the writer takes everything at once, when StartTurn asks
	var mu sync.Mutex
	var txs [][]string // the sessions of each transaction's items
	cfg.trace = func(step traceStep, items []item) {
		if step != stepBegin {
			return
		}
		var ss []string
		for i := range items {
			ss = append(ss, items[i].session())
		}
		mu.Lock()
		txs = append(txs, ss)
		mu.Unlock()
	}
	s, _ := openTest(t, cfg)
	mustSession(t, s, "flood")
	mustSession(t, s, "quick")
	mu.Lock()
	txs = nil
	mu.Unlock()
	for seq := int64(1); seq <= 6; seq++ {
		s.Append(bigEvent("flood", seq, size))
	}
	s.Append(testEvent("quick", 1, time.Now()))
	if _, err := s.StartTurn(ctx, Turn{SessionID: "quick", Agent: "claude", Prompt: "hi"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(txs) < 2 {
		t.Fatalf("transactions = %v; want the quick session's first, then the flood's", txs)
	}
	if !slices.Equal(txs[0], []string{"quick", "quick"}) {
		t.Errorf("first transaction holds %v; want the quick session's event and turn row alone", txs[0])
	}
	evs, err := s.Events(ctx, "flood", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("flood events stored as seqs %v…; want 1..6 in order", seqsOf(evs))
		}
	}
	if len(evs) != 6 {
		t.Errorf("%d flood events stored; want 6", len(evs))
	}
}

func seqsOf(evs []backends.Event) []int64 {
	var out []int64
	for _, ev := range evs {
		out = append(out, ev.Seq)
	}
	return out
}

// lightFirst moves light sessions' items ahead of heavy ones only within
// the stretches between writes about no one session, keeps each session's
// order, and cuts after the leading light run.
func TestLightFirstKeepsOrderWithinSessionsAndBarriers(t *testing.T) {
	ev := func(session string, seq int64, size int) item {
		e := bigEvent(session, seq, size)
		return item{ev: e}
	}
	barrier := item{w: &write{what: "about no session"}}
	items := []item{
		ev("heavy", 1, 3<<20), ev("light", 1, 10), ev("heavy", 2, 3<<20), ev("light", 2, 10),
		barrier,
		ev("heavy", 3, 3<<20), ev("other", 1, 10),
	}
	got, cut, moved := lightFirst(items, nil, 256, 4<<20)
	if !moved {
		t.Fatal("nothing moved")
	}
	var order []string
	for i := range got {
		it := &got[i]
		if it.session() == "" {
			order = append(order, "|")
			continue
		}
		order = append(order, it.ev.Session+":"+string(rune('0'+it.ev.Seq)))
	}
	want := []string{"light:1", "light:2", "heavy:1", "heavy:2", "|", "other:1", "heavy:3"}
	if !slices.Equal(order, want) {
		t.Errorf("order = %v; want %v", order, want)
	}
	if cut != 2 {
		t.Errorf("cut = %d; want 2 (the leading light run)", cut)
	}
	// Items that would fit one transaction are split all the same: the
	// light session's item is not committed with a megabyte.
	small := []item{ev("heavy", 1, 1<<20), ev("light", 1, 10)}
	got, cut, moved = lightFirst(small, nil, 256, 4<<20)
	if !moved || cut != 1 || got[0].ev.Session != "light" {
		t.Errorf("lightFirst(1 MiB of heavy, 10 B of light) = %d items, cut %d, moved %t; want light:1 alone first", len(got), cut, moved)
	}
	// A take of light sessions only is left alone.
	calm := []item{ev("a", 1, 10<<10), ev("b", 1, 10), ev("a", 2, 10<<10)}
	if _, _, moved := lightFirst(calm, nil, 256, 4<<20); moved {
		t.Error("a take of light sessions only was reordered")
	}
}
