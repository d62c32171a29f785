package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The SQLite writer's statements are prepared once and kept across its
// transactions; a write returning rows is not kept (a kept statement
// left in progress would hold every later transaction open), and turns
// started, ended and adopted in turn keep committing.
func TestWriterKeepsItsStatements(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Config{})
	mustSession(t, s, "s1")
	for i := range 5 {
		n, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "demo", Prompt: "p"})
		if err != nil || n != int64(i+1) {
			t.Fatalf("StartTurn %d = %d, %v", i+1, n, err)
		}
		s.Append(testEvent("s1", int64(i+1), time.Now()))
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.stmts.mu.Lock()
	kept := len(s.stmts.m)
	returning := 0
	for q := range s.stmts.m {
		if strings.Contains(q, "RETURNING") {
			returning++
		}
	}
	s.stmts.mu.Unlock()
	if kept == 0 || returning != 0 {
		t.Errorf("kept statements = %d, %d of them RETURNING; want the event insert kept, none returning", kept, returning)
	}
	if evs, err := s.Events(ctx, "s1", 0, 0); err != nil || len(evs) != 5 {
		t.Errorf("events = %d, %v; want 5", len(evs), err)
	}
	// A group statement returning rows, run as an Exec: its transaction
	// commits, and so do the next ones.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i := range 2 {
		w := &write{what: "returning group", session: "s1", wait: newWaited(),
			group: []stmt{{query: insertTurnSQL + " RETURNING number", args: []any{int64(1000 + i), "s1", "demo", "p", "", toUnix(time.Now()), nil}}}}
		if err := s.enqueue(w); err != nil {
			t.Fatal(err)
		}
		if err := s.awaitWaited(wctx, w.wait); err != nil {
			t.Fatalf("group returning rows, write %d: %v", i+1, err)
		}
	}
	if n, err := s.StartTurn(wctx, Turn{SessionID: "s1", Agent: "demo", Prompt: "p"}); err != nil || n != 8 {
		t.Errorf("StartTurn after the returning groups = %d, %v; want 8", n, err)
	}
}
