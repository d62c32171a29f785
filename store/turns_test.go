package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTurns(t *testing.T) {
	ctx := context.Background()
	clock := newTestClock()
	s, _ := openTest(t, Config{Now: clock.Now})
	mustSession(t, s, "s1")
	mustSession(t, s, "s2")

	if _, err := s.LastTurn(ctx, "s1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LastTurn(s1) with no turns error = %v; want ErrNotFound", err)
	}
	if _, err := s.StartTurn(ctx, Turn{SessionID: "nope", Agent: "a", Prompt: "p"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("StartTurn(unknown session) error = %v; want ErrNotFound", err)
	}

	start := clock.Now()
	id1, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "first", CheckpointBefore: "c0",
		StopReason: "ignored", EndedAt: &start})
	if err != nil {
		t.Fatalf("StartTurn(first) error = %v", err)
	}
	id2, err := s.StartTurn(ctx, Turn{SessionID: "s2", Agent: "codex", Prompt: "other"})
	if err != nil {
		t.Fatalf("StartTurn(other) error = %v", err)
	}
	end := clock.Advance(3 * time.Second)
	if err := s.EndTurn(ctx, id1, TurnEnd{StopReason: "end_turn", CheckpointAfter: "c1"}); err != nil {
		t.Fatalf("EndTurn(%d) error = %v", id1, err)
	}
	if err := s.EndTurn(ctx, id1, TurnEnd{StopReason: "cancelled"}); !errors.Is(err, ErrTurnEnded) {
		t.Errorf("EndTurn(%d) twice error = %v; want ErrTurnEnded", id1, err)
	}
	if err := s.EndTurn(ctx, 9999, TurnEnd{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("EndTurn(9999) error = %v; want ErrNotFound", err)
	}
	clock.Advance(time.Second)
	id3, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "gemini", Prompt: "second", CheckpointBefore: "c1"})
	if err != nil {
		t.Fatalf("StartTurn(second) error = %v", err)
	}
	if !(id1 < id2 && id2 < id3) {
		t.Errorf("turn ids %d, %d, %d; want increasing", id1, id2, id3)
	}

	want1 := Turn{ID: id1, SessionID: "s1", Agent: "claude", Prompt: "first", StopReason: "end_turn",
		CheckpointBefore: "c0", CheckpointAfter: "c1", StartedAt: start, EndedAt: &end}
	want3 := Turn{ID: id3, SessionID: "s1", Agent: "gemini", Prompt: "second", CheckpointBefore: "c1",
		StartedAt: clock.Now()}
	if got, err := s.GetTurn(ctx, id1); err != nil || !cmp.Equal(want1, got) {
		t.Errorf("GetTurn(%d) = %+v, %v; want %+v", id1, got, err, want1)
	}
	if _, err := s.GetTurn(ctx, 9999); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetTurn(9999) error = %v; want ErrNotFound", err)
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
		t.Fatalf("EndOpenTurns() = %d, %v; want 2 (turns %d and %d)", n, err, id2, id3)
	}
	got3, err := s.GetTurn(ctx, id3)
	if err != nil || got3.StopReason != "error" || got3.Error != "daemon restarted" || got3.EndedAt == nil || !got3.EndedAt.Equal(swept) {
		t.Errorf("GetTurn(%d) after sweep = %+v, %v; want ended with error at %v", id3, got3, err, swept)
	}
	if got1, _ := s.GetTurn(ctx, id1); !cmp.Equal(want1, got1) {
		t.Errorf("EndOpenTurns changed the ended turn: %+v; want %+v", got1, want1)
	}
}

func TestPermissions(t *testing.T) {
	ctx := context.Background()
	clock := newTestClock()
	s, _ := openTest(t, Config{Now: clock.Now})
	mustSession(t, s, "s1")
	turn, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}

	p1 := PermissionRow{ID: "perm-1", SessionID: "s1", TurnID: turn, Agent: "claude", Action: "edit", Risk: "medium",
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
}
