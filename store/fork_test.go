package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

func TestCopyHistory(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		mustSession(t, s, "src")
		mustSession(t, s, "f1")
		mustSession(t, s, "f2")
		// src: created (1), turn 1 (2,3), a note (4), turn 2 (5,6), turn 3 running (7).
		seq := int64(0)
		add := func(turn int64, typ backends.EventType) {
			seq++
			s.Append(backends.Event{Session: "src", Seq: seq, Turn: turn, Type: typ, Data: []byte(`{"n":1}`)})
		}
		add(0, "session.created")
		for n := int64(1); n <= 3; n++ {
			got, err := s.StartTurn(ctx, Turn{SessionID: "src", Agent: "a", Prompt: "p"})
			if err != nil || got != n {
				t.Fatalf("StartTurn() = %d, %v; want %d", got, err, n)
			}
			add(n, "turn.started")
			if n == 3 {
				break
			}
			if err := s.EndTurn(ctx, "src", n, TurnEnd{StopReason: "end_turn", CheckpointAfter: "c"}); err != nil {
				t.Fatal(err)
			}
			add(n, "turn.ended")
			if n == 1 {
				add(0, "note")
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// Turn 2 was a review of turn 1's work.
		if err := s.PutReview(ctx, Review{Session: "src", Turn: 2, Summary: "fix it", Comments: `[{"path":"a","text":"why?"}]`, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		got, err := s.CopyHistory(ctx, HistoryCopy{From: "src", To: "f1", Turn: 2})
		if err != nil || got != (CopiedHistory{Events: 6, Turns: 2, Reviews: 1}) {
			t.Fatalf("CopyHistory(whole) = %+v, %v; want 6 events, 2 turns, 1 review", got, err)
		}
		if rvs, err := s.Reviews(ctx, "f1"); err != nil || len(rvs) != 1 || rvs[0].Turn != 2 || rvs[0].Comments != `[{"path":"a","text":"why?"}]` {
			t.Errorf("Reviews(f1) = %+v, %v; want src's review of turn 2", rvs, err)
		}
		got, err = s.CopyHistory(ctx, HistoryCopy{From: "src", To: "f2", Turn: 1, AtTurn: true})
		if err != nil || got != (CopiedHistory{Events: 3, Turns: 1}) {
			t.Fatalf("CopyHistory(at turn 1) = %+v, %v; want 3 events, 1 turn, no review", got, err)
		}
		evs, err := s.Events(ctx, "f1", 0, 0)
		if err != nil || len(evs) != 6 {
			t.Fatalf("Events(f1) = %d, %v", len(evs), err)
		}
		for i, ev := range evs {
			if ev.Seq != int64(i+1) || ev.Session != "f1" || ev.Turn > 2 {
				t.Errorf("copied event %d = %+v", i, ev)
			}
		}
		next, err := s.StartTurn(ctx, Turn{SessionID: "f2", Agent: "a", Prompt: "p"})
		if err != nil || next != 2 {
			t.Errorf("fork's next turn = %d, %v; want 2", next, err)
		}
		if ns, err := s.NextSeq(ctx, "f2"); err != nil || ns != 4 {
			t.Errorf("NextSeq(f2) = %d, %v; want 4", ns, err)
		}
		if _, err := s.CopyHistory(ctx, HistoryCopy{From: "src", To: "nope", Turn: 1}); !errors.Is(err, ErrNotFound) {
			t.Errorf("CopyHistory(to unknown) error = %v; want ErrNotFound", err)
		}
	})
}
