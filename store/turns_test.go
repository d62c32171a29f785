package store

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/google/go-cmp/cmp"
)

func TestTurns(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		s, logs := openTest(t, e.db(t, Config{Now: clock.Now}))
		mustSession(t, s, "s1")
		mustSession(t, s, "s2")

		if _, err := s.LastTurn(ctx, "s1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("LastTurn(s1) with no turns error = %v; want ErrNotFound", err)
		}
		// Turn rows are queued: what the database refuses is counted and logged.
		rejected := func(want int64, what string) {
			t.Helper()
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if got := s.Stats().Rejected; got != want {
				t.Errorf("after %s: Stats().Rejected = %d; want %d", what, got, want)
			}
		}
		// StartTurn waits for its row: a refused one is its error.
		if _, err := s.StartTurn(ctx, Turn{SessionID: "nope", Agent: "a", Prompt: "p"}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("StartTurn(unknown session) error = %v; want ErrNotFound", err)
		}
		rejected(1, "StartTurn(unknown session)")
		if !strings.Contains(logs.String(), "write rejected") {
			t.Errorf("log has no rejected write:\n%s", logs)
		}

		// Turns are numbered per session, from 1.
		start := clock.Now()
		n1, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "first", CheckpointBefore: "c0",
			StopReason: "ignored", Number: 7, EndedAt: &start})
		if err != nil {
			t.Fatalf("StartTurn(first) error = %v", err)
		}
		other, err := s.StartTurn(ctx, Turn{SessionID: "s2", Agent: "codex", Prompt: "other"})
		if err != nil {
			t.Fatalf("StartTurn(other) error = %v", err)
		}
		if n1 != 1 || other != 1 {
			t.Errorf("first turns of s1 and s2 = %d and %d; want 1 and 1", n1, other)
		}
		end := clock.Advance(3 * time.Second)
		if err := s.EndTurn(ctx, "s1", n1, TurnEnd{StopReason: "end_turn", CheckpointAfter: "c1"}); err != nil {
			t.Fatalf("EndTurn(s1, %d) error = %v", n1, err)
		}
		if err := s.EndTurn(ctx, "s1", n1, TurnEnd{StopReason: "cancelled"}); err != nil {
			t.Errorf("EndTurn(s1, %d) twice error = %v; want nil (the write is queued)", n1, err)
		}
		rejected(2, "EndTurn twice")
		if err := s.EndTurn(ctx, "s1", 9999, TurnEnd{}); err != nil {
			t.Errorf("EndTurn(s1, 9999) error = %v; want nil (the write is queued)", err)
		}
		rejected(3, "EndTurn(s1, 9999)")
		clock.Advance(time.Second)
		n2, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "gemini", Prompt: "second", CheckpointBefore: "c1"})
		if err != nil {
			t.Fatalf("StartTurn(second) error = %v", err)
		}
		if n2 != 2 {
			t.Errorf("second turn of s1 = %d; want 2", n2)
		}

		got1, err := s.GetTurn(ctx, "s1", 1)
		if err != nil {
			t.Fatalf("GetTurn(s1, 1) error = %v", err)
		}
		want1 := Turn{ID: got1.ID, SessionID: "s1", Number: 1, Agent: "claude", Prompt: "first", StopReason: "end_turn",
			CheckpointBefore: "c0", CheckpointAfter: "c1", StartedAt: start, EndedAt: &end}
		if !cmp.Equal(want1, got1) {
			t.Errorf("GetTurn(s1, 1) = %+v; want %+v", got1, want1)
		}
		got3, err := s.GetTurn(ctx, "s1", 2)
		if err != nil {
			t.Fatalf("GetTurn(s1, 2) error = %v", err)
		}
		want3 := Turn{ID: got3.ID, SessionID: "s1", Number: 2, Agent: "gemini", Prompt: "second", CheckpointBefore: "c1",
			StartedAt: clock.Now()}
		if !cmp.Equal(want3, got3) {
			t.Errorf("GetTurn(s1, 2) = %+v; want %+v", got3, want3)
		}
		if gotOther, err := s.GetTurn(ctx, "s2", 1); err != nil || gotOther.Prompt != "other" || gotOther.ID == got1.ID {
			t.Errorf("GetTurn(s2, 1) = %+v, %v; want the other session's turn, with its own row id", gotOther, err)
		}
		for _, k := range []struct {
			session string
			n       int64
		}{{"s1", 9999}, {"s2", 2}, {"nope", 1}} {
			if _, err := s.GetTurn(ctx, k.session, k.n); !errors.Is(err, ErrNotFound) {
				t.Errorf("GetTurn(%s, %d) error = %v; want ErrNotFound", k.session, k.n, err)
			}
		}
		if got, err := s.LastTurn(ctx, "s1"); err != nil || !cmp.Equal(want3, got) {
			t.Errorf("LastTurn(s1) = %+v, %v; want %+v", got, err, want3)
		}
		list, err := s.ListTurns(ctx, "s1")
		if err != nil {
			t.Fatalf("ListTurns(s1) error = %v", err)
		}
		if diff := cmp.Diff([]Turn{want1, want3}, list); diff != "" {
			t.Errorf("ListTurns(s1) (-want +got):\n%s", diff)
		}

		swept := clock.Advance(time.Minute)
		n, err := s.EndOpenTurns(ctx, "daemon restarted")
		if err != nil || n != 2 {
			t.Fatalf("EndOpenTurns() = %d, %v; want 2 (s1's turn 2 and s2's turn 1)", n, err)
		}
		got3, err = s.GetTurn(ctx, "s1", 2)
		if err != nil || got3.StopReason != "error" || got3.Error != "daemon restarted" || got3.EndedAt == nil || !got3.EndedAt.Equal(swept) {
			t.Errorf("GetTurn(s1, 2) after sweep = %+v, %v; want ended with error at %v", got3, err, swept)
		}
		if got1, _ := s.GetTurn(ctx, "s1", 1); !cmp.Equal(want1, got1) {
			t.Errorf("EndOpenTurns changed the ended turn: %+v; want %+v", got1, want1)
		}
	})
}

// TestTurnRowsReadTheirWrites reads turns right after queuing their rows
// with a writer that would otherwise wait an hour to commit.
func TestTurnRowsReadTheirWrites(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{FlushInterval: time.Hour}))
		mustSession(t, s, "s1")
		for i := range 3 {
			s.Append(backends.Event{Session: "s1", Seq: int64(i + 1), Type: "x"})
			id, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "p"})
			if err != nil {
				t.Fatal(err)
			}
			if id != int64(i+1) {
				t.Fatalf("StartTurn #%d = %d; want %d", i+1, id, i+1)
			}
			if err := s.EndTurn(ctx, "s1", id, TurnEnd{StopReason: "end_turn"}); err != nil {
				t.Fatal(err)
			}
			got, err := s.GetTurn(ctx, "s1", id)
			if err != nil || got.StopReason != "end_turn" || got.EndedAt == nil {
				t.Fatalf("GetTurn(s1, %d) right after EndTurn = %+v, %v; want it ended", id, got, err)
			}
			if last, err := s.LastTurn(ctx, "s1"); err != nil || last.Number != id {
				t.Fatalf("LastTurn(s1) = %+v, %v; want turn %d", last, err, id)
			}
		}
	})
}

// TestTurnNumbersAcrossReopen: numbers go on after the store is reopened,
// and a second store cannot open the same SQLite database meanwhile (it
// can a PostgreSQL one).
func TestTurnNumbersAcrossReopen(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		loc := e.db(t, Config{})
		s, _ := openTest(t, at(loc, Config{}))
		mustSession(t, s, "s1")
		first, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "p"})
		if err != nil {
			t.Fatal(err)
		}
		second, err := Open(ctx, loc)
		if e.postgres {
			// Several daemons share a PostgreSQL database.
			if err != nil {
				t.Fatalf("second Open(%q) error = %v; want nil", loc.URL, err)
			}
			second.Close()
		} else if !errors.Is(err, ErrLocked) {
			t.Fatalf("second Open(%q) error = %v; want ErrLocked", loc.Path, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s2, _ := openTest(t, at(loc, Config{}))
		next, err := s2.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "q"})
		if err != nil || first != 1 || next != 2 {
			t.Fatalf("StartTurn before and after reopen = %d, then %d, %v; want 1 then 2", first, next, err)
		}
		if got, err := s2.GetTurn(ctx, "s1", first); err != nil || got.Prompt != "p" {
			t.Fatalf("GetTurn(s1, %d) after reopen = %+v, %v; want the first turn", first, got, err)
		}
	})
}

func TestPermissions(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		s, _ := openTest(t, e.db(t, Config{Now: clock.Now}))
		mustSession(t, s, "s1")
		turn, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "p"})
		if err != nil {
			t.Fatal(err)
		}

		p1 := PermissionRow{ID: "perm-1", SessionID: "s1", Turn: turn, Agent: "claude", Action: "edit", Risk: "medium",
			Request: json.RawMessage(`{"toolCall":{"title":"write a.go"}}`)}
		if err := s.InsertPermission(ctx, p1); err != nil {
			t.Fatalf("InsertPermission(perm-1) error = %v", err)
		}
		p1.RequestedAt = clock.Now()
		decided := clock.Advance(2 * time.Second)
		p2 := PermissionRow{ID: "perm-2", SessionID: "s1", Agent: "claude", Action: "read", Risk: "low",
			Decision: "allow", DecidedBy: "policy", OptionKind: "allow_once", RequestedAt: decided, DecidedAt: &decided}
		if err := s.InsertPermission(ctx, p2); err != nil {
			t.Fatalf("InsertPermission(perm-2) error = %v", err)
		}
		if err := s.InsertPermission(ctx, p1); !errors.Is(err, ErrExists) {
			t.Errorf("InsertPermission(perm-1 again) error = %v; want ErrExists", err)
		}
		if err := s.InsertPermission(ctx, PermissionRow{ID: "perm-x", SessionID: "nope"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("InsertPermission(unknown session) error = %v; want ErrNotFound", err)
		}
		if err := s.InsertPermission(ctx, PermissionRow{SessionID: "s1"}); err == nil {
			t.Errorf("InsertPermission(empty id) error = nil; want an error")
		}

		resolved := clock.Advance(5 * time.Second)
		d := PermissionDecision{Decision: "reject", DecidedBy: "user", OptionKind: "reject_once"}
		if err := s.ResolvePermission(ctx, "perm-1", d); err != nil {
			t.Fatalf("ResolvePermission(perm-1) error = %v", err)
		}
		if err := s.ResolvePermission(ctx, "nope", d); !errors.Is(err, ErrNotFound) {
			t.Errorf("ResolvePermission(nope) error = %v; want ErrNotFound", err)
		}
		p1.Decision, p1.DecidedBy, p1.OptionKind, p1.DecidedAt = d.Decision, d.DecidedBy, d.OptionKind, &resolved

		got, err := s.ListPermissions(ctx, "s1")
		if err != nil {
			t.Fatalf("ListPermissions(s1) error = %v", err)
		}
		if diff := cmp.Diff([]PermissionRow{p1, p2}, got); diff != "" {
			t.Errorf("ListPermissions(s1) (-want +got):\n%s", diff)
		}
	})
}

// TestTurnByKey: a turn started with a key is found by it in its own
// session only; another key, or none, finds nothing; a second turn of the
// session with the same key is refused by the database.
func TestTurnByKey(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		mustSession(t, s, "s1")
		mustSession(t, s, "s2")
		if _, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "no key"}); err != nil {
			t.Fatal(err)
		}
		n, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "keyed", RequestKey: "k-1"})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.TurnByKey(ctx, "s1", "k-1")
		if err != nil || got.Number != n || got.Prompt != "keyed" {
			t.Errorf("TurnByKey(s1, k-1) = %+v, %v; want turn %d", got, err, n)
		}
		for _, tt := range []struct{ session, key string }{{"s2", "k-1"}, {"s1", "k-2"}, {"s1", ""}} {
			if _, err := s.TurnByKey(ctx, tt.session, tt.key); !errors.Is(err, ErrNotFound) {
				t.Errorf("TurnByKey(%s, %q) error = %v; want ErrNotFound", tt.session, tt.key, err)
			}
		}
		if _, err := s.StartTurn(ctx, Turn{SessionID: "s2", Agent: "a", Prompt: "same key, other session", RequestKey: "k-1"}); err != nil {
			t.Errorf("a key used in another session: %v", err)
		}
		if _, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "again", RequestKey: "k-1"}); err == nil {
			t.Error("a second turn with the same key in one session was stored")
		}
		n2, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "keyed too", RequestKey: "k-2"})
		if err != nil {
			t.Fatal(err)
		}
		keys, err := s.TurnKeys(ctx, "s1")
		if want := map[string]int64{"k-1": n, "k-2": n2}; err != nil || !maps.Equal(keys, want) {
			t.Errorf("TurnKeys(s1) = %v, %v; want %v", keys, err, want)
		}
		if keys, err := s.TurnKeys(ctx, "s3"); err != nil || len(keys) != 0 {
			t.Errorf("TurnKeys of a session without turns = %v, %v; want none", keys, err)
		}
	})
}
