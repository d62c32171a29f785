package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/google/go-cmp/cmp"
)

func TestReviews(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		s, _ := openTest(t, e.db(t, Config{Now: clock.Now}))
		mustSession(t, s, "s1")
		if err := s.PutReview(ctx, Review{Session: "nope", Turn: 1, Comments: "[]"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("PutReview(unknown session) error = %v; want ErrNotFound", err)
		}
		r := Review{Session: "s1", Turn: 2, Summary: "tidy up", Comments: `[{"path":"a.go"}]`}
		if err := s.PutReview(ctx, r); err != nil {
			t.Fatalf("PutReview() error = %v", err)
		}
		r.Judged, r.Comments = true, `[{"path":"a.go","addressed":true}]`
		if err := s.PutReview(ctx, r); err != nil {
			t.Fatalf("PutReview(again) error = %v", err)
		}
		got, err := s.Reviews(ctx, "s1")
		r.CreatedAt = clock.Now()
		if diff := cmp.Diff([]Review{r}, got); err != nil || diff != "" {
			t.Errorf("Reviews(s1) error = %v, (-want +got):\n%s", err, diff)
		}
		if got, err := s.Reviews(ctx, "none"); err != nil || len(got) != 0 {
			t.Errorf("Reviews(none) = %v, %v; want none", got, err)
		}
	})
}

func TestSessionPR(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		mustSession(t, s, "s1")
		mustSession(t, s, "s2")
		if err := s.SetSessionPR(ctx, "s1", "https://example.com/pr/1"); err != nil {
			t.Fatalf("SetSessionPR(s1) error = %v", err)
		}
		if err := s.SetSessionPR(ctx, "nope", "https://x"); !errors.Is(err, ErrNotFound) {
			t.Errorf("SetSessionPR(unknown) error = %v; want ErrNotFound", err)
		}
		got, err := s.SessionPRs(ctx)
		if diff := cmp.Diff(map[string]string{"s1": "https://example.com/pr/1"}, got); err != nil || diff != "" {
			t.Errorf("SessionPRs() error = %v, (-want +got):\n%s", err, diff)
		}
	})
}

func TestTurnReply(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		mustSession(t, s, "s1")
		chunk := func(seq, turn int64, role, text string) backends.Event {
			d, _ := json.Marshal(backends.ChunkData{Role: role, Text: text})
			return backends.Event{Seq: seq, Session: "s1", Turn: turn, Type: backends.EventMessageChunk, Data: d}
		}
		s.Append(chunk(1, 1, backends.RoleAgent, "old"))
		s.Append(chunk(2, 2, backends.RoleThought, "hmm "))
		s.Append(chunk(3, 2, backends.RoleAgent, "fixed a.go:3 "))
		s.Append(chunk(4, 2, backends.RoleAgent, "and more"))
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got, err := s.TurnReply(ctx, "s1", 2); err != nil || got != "fixed a.go:3 and more" {
			t.Errorf("TurnReply(s1, 2) = %q, %v; want %q", got, err, "fixed a.go:3 and more")
		}
	})
}
