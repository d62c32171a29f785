package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// committedLog records the events the store's commit hook delivers and
// checks, at each call, that the event is already readable from the
// database: nothing reaches a reader before its commit.
type committedLog struct {
	t  *testing.T
	s  *Store
	mu sync.Mutex
	// seen are the delivered events, in delivery order.
	seen []backends.Event
}

func (l *committedLog) hook(ev backends.Event) {
	got, err := l.s.Events(context.Background(), ev.Session, ev.Seq-1, 1)
	if err != nil || len(got) != 1 || got[0].Seq != ev.Seq || string(got[0].Data) != string(ev.Data) {
		l.t.Errorf("event %s/%d delivered before it is readable: Events = %+v, %v", ev.Session, ev.Seq, got, err)
	}
	l.mu.Lock()
	l.seen = append(l.seen, ev)
	l.mu.Unlock()
}

func (l *committedLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

// TestCommitHookFollowsCommit: with the writer held up by a lock another
// connection holds, no event is delivered; once it is released, every
// event is delivered once, each session's in append order, after its
// commit; an event the database refuses (a duplicate seq) is never
// delivered.
func TestCommitHookFollowsCommit(t *testing.T) {
	cfg := fastRetry(t.TempDir() + "/agentpool.db")
	cfg.BusyTimeout = 20 * time.Millisecond
	s, _ := openTest(t, cfg)
	mustSession(t, s, "s1")
	mustSession(t, s, "s2")
	l := &committedLog{t: t, s: s}

	release := lockDB(t, cfg.Path)
	var want []backends.Event
	for seq := int64(1); seq <= 50; seq++ {
		for _, id := range []string{"s1", "s2"} {
			ev := testEvent(id, seq, time.Now())
			want = append(want, ev)
			s.AppendNotify(ev, l.hook)
		}
	}
	s.AppendNotify(testEvent("s1", 7, time.Now()), l.hook) // a duplicate: refused
	waitFor(t, "a failed attempt", func() bool { return s.Stats().Retries > 0 })
	if n := l.len(); n != 0 {
		t.Fatalf("%d events delivered while the writer could not commit; want 0", n)
	}
	release()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seen) != len(want) {
		t.Fatalf("delivered %d events; want %d (the duplicate never)", len(l.seen), len(want))
	}
	// Each session's events in their append order (the writer takes the
	// sessions round-robin, so the two interleave by turns).
	last := map[string]int64{}
	for i, ev := range l.seen {
		if ev.Seq != last[ev.Session]+1 {
			t.Fatalf("delivery %d is %s/%d after %s/%d; want each session's in append order", i, ev.Session, ev.Seq, ev.Session, last[ev.Session])
		}
		last[ev.Session] = ev.Seq
	}
	if st := s.Stats(); st.Rejected != 1 || st.Appended != int64(len(want)) {
		t.Errorf("Stats() = %+v; want 1 rejected, %d appended", st, len(want))
	}
}

// TestStartTurnReturnsAfterCommit: StartTurn does not wait for the
// writer's linger, its row is readable when it returns, and a StartTurn
// given up (its context ended while the writer could not commit) never
// writes its row, even once the writer recovers, and leaves no gap in the
// session's turn numbers.
func TestStartTurnReturnsAfterCommit(t *testing.T) {
	ctx := context.Background()
	cfg := fastRetry(t.TempDir() + "/agentpool.db")
	cfg.FlushInterval = time.Hour
	cfg.BusyTimeout = 20 * time.Millisecond
	s, _ := openTest(t, cfg)
	mustSession(t, s, "s1")
	id, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.db.GetContext(ctx, &n, `SELECT COUNT(*) FROM turns WHERE session_id = 's1' AND number = ?`, id); err != nil || n != 1 {
		t.Fatalf("turn %d rows right after StartTurn = %d, %v; want 1", id, n, err)
	}

	release := lockDB(t, cfg.Path)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := s.StartTurn(short, Turn{SessionID: "s1", Agent: "a", Prompt: "lost"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("StartTurn with the database locked error = %v; want DeadlineExceeded", err)
	}
	release()
	next, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "q"})
	if err != nil || id != 1 || next != 2 {
		t.Fatalf("StartTurn before and after the lock = %d, then %d, %v; want 1 then 2 (the given-up turn has no number)", id, next, err)
	}
	turns, err := s.ListTurns(ctx, "s1")
	if err != nil || len(turns) != 2 || turns[0].Number != id || turns[1].Number != next || turns[1].Prompt != "q" {
		t.Errorf("ListTurns(s1) = %+v, %v; want turns %d and %d only", turns, err, id, next)
	}
}

// TestReadsDoNotWaitForAFailingWriter: while the writer cannot commit,
// reads of sessions and turns return at once (without the queued write)
// instead of waiting for it, and see it once it is written.
func TestReadsDoNotWaitForAFailingWriter(t *testing.T) {
	ctx := context.Background()
	cfg := fastRetry(t.TempDir() + "/agentpool.db")
	cfg.BusyTimeout = 20 * time.Millisecond
	s, _ := openTest(t, cfg)
	mustSession(t, s, "s1")
	release := lockDB(t, cfg.Path)
	if err := s.SetActiveAgent(ctx, "s1", "b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a failed attempt", func() bool { return s.Stats().Retries > 0 })
	start := time.Now()
	if _, err := s.ListSessions(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSession(ctx, "s1"); err != nil || got.ActiveAgent != "" {
		t.Errorf("GetSession(s1) while the write is stuck = %+v, %v; want the old row", got, err)
	}
	if d := time.Since(start); d > 2*readWait {
		t.Errorf("reads took %v with a failing writer; want at most %v", d, 2*readWait)
	}
	release()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSession(ctx, "s1"); err != nil || got.ActiveAgent != "b" {
		t.Errorf("GetSession(s1) after the write = %+v, %v; want active agent b", got, err)
	}
}
