package pool_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// TestTurnsNumberedPerSession: each session numbers its turns from 1, in
// what StartPrompt answers, in Turns, in its events (turn.started,
// turn.ended, the agent's, a permission request's) and in the turn that
// Diff, WaitTurn and Restore take; a turn number of one session does not
// reach another session's turn.
func TestTurnsNumberedPerSession(t *testing.T) {
	writer := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{Write: &agenttest.FileOp{Path: "new.txt", Content: "work {{prompt}}"}},
		{Permission: &agenttest.Permission{ToolCall: agenttest.ToolCall{ID: "t1", Title: "Write file", Kind: "edit"}}},
	}}}}
	e := newEnv(t, map[string]any{"w": providerEntry(writer)}, nil)
	ctx := context.Background()
	first, second := e.session("w"), e.session("w")

	run := func(session, text string) pool.Turn {
		t.Helper()
		cur, err := e.p.Get(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := e.p.Subscribe(ctx, session, cur.LastSeq)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		tn, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: session, Text: text})
		if err != nil {
			t.Fatalf("StartPrompt(%s) error = %v", session, err)
		}
		nextOfType(t, sub, backends.EventPermissionRequest)
		for _, p := range e.p.Pending(session) {
			if p.Request.Turn != tn.ID {
				t.Errorf("pending request of session %s names turn %d; want %d", session, p.Request.Turn, tn.ID)
			}
			if err := e.p.Answer(session, p.ID, "allow_once"); err != nil {
				t.Fatal(err)
			}
		}
		done, err := e.p.WaitTurn(ctx, session, tn.ID)
		if err != nil || done.ID != tn.ID || done.StopReason != "end_turn" {
			t.Fatalf("WaitTurn(%s, %d) = %+v, %v; want it ended", session, tn.ID, done, err)
		}
		return tn
	}
	if tn := run(first.ID, "one"); tn.ID != 1 {
		t.Errorf("first turn of the first session = %d; want 1", tn.ID)
	}
	if tn := run(first.ID, "two"); tn.ID != 2 {
		t.Errorf("second turn of the first session = %d; want 2", tn.ID)
	}
	if tn := run(second.ID, "three"); tn.ID != 1 {
		t.Errorf("first turn of the second session = %d; want 1", tn.ID)
	}

	for _, s := range []struct {
		id    string
		turns []int64
	}{{first.ID, []int64{1, 2}}, {second.ID, []int64{1}}} {
		turns, err := e.p.Turns(ctx, s.id)
		if err != nil || len(turns) != len(s.turns) {
			t.Fatalf("Turns(%s) = %+v, %v; want %d turns", s.id, turns, err, len(s.turns))
		}
		for i, tn := range turns {
			if tn.ID != s.turns[i] || tn.Session != s.id {
				t.Errorf("Turns(%s)[%d] = turn %d of %s; want turn %d", s.id, i, tn.ID, tn.Session, s.turns[i])
			}
		}
		for _, ev := range e.events(s.id) {
			switch ev.Type {
			case backends.EventTurnStarted, backends.EventTurnEnded, backends.EventPermissionRequest, backends.EventFSWrite:
			default:
				continue
			}
			if ev.Turn < 1 || ev.Turn > int64(len(s.turns)) {
				t.Errorf("session %s: %s event %d carries turn %d; want one of %v", s.id, ev.Type, ev.Seq, ev.Turn, s.turns)
			}
			var d struct {
				Turn int64 `json:"turn"`
			}
			if ev.Type == backends.EventTurnStarted || ev.Type == backends.EventTurnEnded {
				if err := json.Unmarshal(ev.Data, &d); err != nil || d.Turn != ev.Turn {
					t.Errorf("session %s: %s data %s; want \"turn\": %d", s.id, ev.Type, ev.Data, ev.Turn)
				}
			}
		}
	}

	// Turn 1 of each session is its own: its diff is that session's work.
	for _, id := range []string{first.ID, second.ID} {
		d, err := e.p.Diff(ctx, id, 1)
		if err != nil || len(d.Files) != 1 || d.Files[0].Path != "new.txt" {
			t.Errorf("Diff(%s, turn 1) = %+v, %v; want new.txt", id, d.Files, err)
		}
	}
	if _, err := e.p.Diff(ctx, second.ID, 2); err == nil {
		t.Errorf("Diff(second, turn 2) error = nil; want ErrNoTurn (turn 2 is the first session's)")
	}
	if err := e.p.Restore(ctx, second.ID, 1, false); err != nil {
		t.Errorf("Restore(second, turn 1) error = %v", err)
	}
}
