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
// while others fill it with big ones: a flooding session waits once it
// holds its share (a quarter of QueueBytes), the floods together at
// QueueBytes, the light one goes on up to the hard bound.
func TestLightSessionFindsRoomWhileAnotherFloods(t *testing.T) {
	const size = 1 << 20
	ctx := context.Background()
	s, _ := openTest(t, fastRetry(""))
	floods := []string{"flood", "flood2", "flood3", "flood4", "flood5"}
	for _, id := range floods {
		mustSession(t, s, id)
	}
	mustSession(t, s, "light")
	release := lockDB(t, s.cfg.Path) // nothing is written: the queue fills
	seq := int64(0)
	for _, id := range floods {
		n := int64(0)
		for {
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err := s.WaitRoom(wctx, id)
			cancel()
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("WaitRoom(%s) = %v", id, err)
				}
				break
			}
			n++
			seq++
			s.Append(bigEvent(id, n, size))
			if n > 64 {
				t.Fatalf("the flooding session %s was never held back", id)
			}
		}
		if id == "flood" {
			if held, _ := s.queue.held(); held < s.cfg.QueueBytes/sessionShare || held > s.cfg.QueueBytes/sessionShare+2*size {
				t.Fatalf("the first flood was held back at %d bytes; want its share, %d", held, s.cfg.QueueBytes/sessionShare)
			}
		}
	}
	if held, _ := s.queue.held(); held < s.cfg.QueueBytes {
		t.Fatalf("the floods were held back at %d bytes, below QueueBytes %d", held, s.cfg.QueueBytes)
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
