package store

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// bigEvent is an event of session at seq whose Data is a JSON string of
// size bytes (plus its quotes), allocated for it alone.
func bigEvent(session string, seq int64, size int) backends.Event {
	data := make([]byte, 0, size+2)
	data = append(data, '"')
	data = append(data, strings.Repeat("x", size)...)
	data = append(data, '"')
	return backends.Event{Seq: seq, Session: session, Agent: "claude", Type: backends.EventMessageChunk,
		Time: time.Now(), Data: json.RawMessage(data)}
}

// Two producers flooding the store with 1 MiB events, waiting for room
// as the pool does, are held up once the queue holds its byte budget: the
// queue (with what the writer is writing) never holds more than
// QueueBytes and one event per producer, even while the database is
// locked and nothing is written; once it is released, every event is
// written in order and none is dropped.
func TestQueueHoldsAtMostItsBytesUnderAFloodOfBigEvents(t *testing.T) {
	// The default budget, 8 MiB: the test holds the store to it.
	const size, perSession, budget = 1 << 20, 40, 8 << 20
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentpool.db")
	cfg := fastRetry(path)
	s, _ := openTest(t, cfg)
	sessions := []string{"s1", "s2"}
	for _, id := range sessions {
		mustSession(t, s, id)
	}
	release := lockDB(t, path)
	var accepted atomic.Int64
	var wg sync.WaitGroup
	for _, id := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int64(1); seq <= perSession; seq++ {
				if err := s.WaitRoom(ctx, id); err != nil {
					t.Errorf("WaitRoom() = %v", err)
					return
				}
				s.Append(bigEvent(id, seq, size))
				accepted.Add(1)
			}
		}()
	}
	waitFor(t, "the writer to fail three times", func() bool { return s.Stats().Retries >= 3 })
	// Give the producers time to run into the bound (or past it).
	time.Sleep(100 * time.Millisecond)
	slack := int64(len(sessions)) * (size + 2 + itemOverhead)
	held, peak := s.queue.held()
	if n := accepted.Load(); n*size > budget+slack {
		t.Errorf("%d events of 1 MiB accepted while nothing can be written (%d bytes held); want at most %d MiB and one per producer",
			n, held, budget>>20)
	}
	release()
	wg.Wait()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_, peak = s.queue.held()
	if peak > budget+slack {
		t.Errorf("the queue held up to %d bytes; want at most %d (QueueBytes and one event per producer)", peak, budget+slack)
	}
	t.Logf("queue: at most %.1f MiB held (budget %d MiB)", float64(peak)/(1<<20), budget>>20)
	if st := s.Stats(); st.Appended != 2*perSession || st.Dropped != 0 {
		t.Errorf("Stats() = %+v; want %d appended, none dropped", st, 2*perSession)
	}
	if now, _ := s.queue.held(); now != 0 {
		t.Errorf("the queue holds %d bytes once everything is written; want 0", now)
	}
	for _, id := range sessions {
		got, err := s.EventsPage(ctx, id, 0, 0, 0)
		if err != nil || len(got) != perSession || got[perSession-1].Seq != perSession {
			t.Errorf("Events(%s) = %d events, %v; want seqs 1..%d", id, len(got), err, perSession)
		}
	}
}

// A page of stored events stops once their Data reaches maxBytes: a
// replay of 1 MiB events reads at most a page's bytes at a time, whatever
// count it asks for.
func TestEventsPageIsBoundedByBytes(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		const size, n = 1 << 20, 30
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		mustSession(t, s, "s1")
		for seq := int64(1); seq <= n; seq++ {
			if err := s.WaitRoom(ctx, "s1"); err != nil {
				t.Fatal(err)
			}
			s.Append(bigEvent("s1", seq, size))
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		var after int64
		pages := 0
		for after < n {
			page, err := s.EventsPage(ctx, "s1", after, 512, 4*size)
			if err != nil || len(page) == 0 {
				t.Fatalf("EventsPage(after %d) = %d events, %v", after, len(page), err)
			}
			var b int
			for i, ev := range page {
				b += len(ev.Data)
				if want := after + int64(i) + 1; ev.Seq != want {
					t.Fatalf("EventsPage(after %d)[%d].Seq = %d; want %d", after, i, ev.Seq, want)
				}
			}
			if b >= 4*size+size+2 {
				t.Errorf("page after %d holds %d bytes of Data; want less than 4 MiB and one event", after, b)
			}
			after = page[len(page)-1].Seq
			pages++
		}
		if pages < n/5 {
			t.Errorf("%d events of 1 MiB read in %d pages of at most 4 MiB; want at least %d", n, pages, n/5)
		}
		if all, err := s.Events(ctx, "s1", 0, 0); err != nil || len(all) != n {
			t.Errorf("Events(s1) = %d events, %v; want %d", len(all), err, n)
		}
	})
}
