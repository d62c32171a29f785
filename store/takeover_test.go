package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentpool/agentpool/backends"
)

// TestTakeOverRace: two hosts take the same expired sessions over at
// once; each session is taken once, with one session.moved.
func TestTakeOverRace(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b", "c")
	a, racers := st[0], st[1:]
	const n = 8
	for i := range n {
		id := fmt.Sprintf("s%d", i)
		mustSession(t, a, id)
		expireLease(t, a, id)
	}
	var wg sync.WaitGroup
	wins := make([][]string, len(racers))
	for r, s := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				id := fmt.Sprintf("s%d", i)
				_, err := s.TakeOver(ctx, id)
				switch {
				case err == nil:
					wins[r] = append(wins[r], id)
				case !errors.Is(err, ErrLeaseHeld):
					t.Errorf("TakeOver(%s) by %s error = %v; want nil or ErrLeaseHeld", id, s.HostID(), err)
				}
			}
		}()
	}
	wg.Wait()
	if got := len(wins[0]) + len(wins[1]); got != n {
		t.Fatalf("take-overs won = %v; want %d in all", wins, n)
	}
	for i := range n {
		id := fmt.Sprintf("s%d", i)
		l, err := a.GetLease(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		winner := "b"
		if slices.Contains(wins[1], id) {
			winner = "c"
		}
		if l.Owner != winner || l.Epoch != 2 {
			t.Errorf("lease of %s = %+v; want owner %s at epoch 2", id, l, winner)
		}
		if got := eventTypes(t, a, id); !slices.Equal(got, []string{string(EventSessionMoved)}) {
			t.Errorf("events of %s = %v; want one session.moved", id, got)
		}
	}
}

// TestTakeOverRefusedWhileHeld: a lease that has not expired, or a
// closed session, is not taken over.
func TestTakeOverRefusedWhileHeld(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b")
	a, b := st[0], st[1]
	mustSession(t, a, "s1")
	if _, err := b.TakeOver(ctx, "s1"); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("TakeOver(unexpired) error = %v; want ErrLeaseHeld", err)
	}
	if l, _ := a.GetLease(ctx, "s1"); l.Owner != "a" || l.Epoch != 1 {
		t.Errorf("lease after a refused take-over = %+v; want a's at epoch 1", l)
	}
	if err := a.UpdateSessionStatus(ctx, "s1", SessionClosed); err != nil {
		t.Fatal(err)
	}
	expireLease(t, a, "s1")
	if _, err := b.TakeOver(ctx, "s1"); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("TakeOver(closed) error = %v; want ErrLeaseHeld", err)
	}
	if _, err := b.TakeOver(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("TakeOver(unknown) error = %v; want ErrNotFound", err)
	}
}

// TestTakeOverInterruptsTheOldOwnersWork: the take-over ends the open
// turn as interrupted with its turn.ended, marks the running agent
// crashed, and reports the move with what is lost.
func TestTakeOverInterruptsTheOldOwnersWork(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b")
	a, b := st[0], st[1]
	mustSession(t, a, "s1")
	n, err := a.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.UpsertAgentSession(ctx, AgentSession{SessionID: "s1", Agent: "claude", PID: 4242, Status: AgentActive}); err != nil {
		t.Fatal(err)
	}
	const ck = "0123456789abcdef0123"
	if err := a.RecordPushed(ctx, "s1", "agentpool/s1", ck); err != nil {
		t.Fatal(err)
	}
	expireLease(t, a, "s1")
	if exp, err := b.ExpiredLeases(ctx, 0); err != nil || len(exp) != 1 || exp[0].Session != "s1" || exp[0].Owner != "a" {
		t.Errorf("ExpiredLeases() = %+v, %v; want s1 of a", exp, err)
	}
	m, err := b.TakeOver(ctx, "s1")
	if err != nil {
		t.Fatalf("TakeOver() error = %v", err)
	}
	if m.From != "a" || m.Lease.Owner != "b" || m.Lease.Epoch != 2 || !slices.Equal(m.Interrupted, []int64{n}) {
		t.Errorf("TakeOver() = %+v; want from a to b at epoch 2, turn %d interrupted", m, n)
	}
	stored, err := b.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(stored, m.Events); diff != "" {
		t.Errorf("Moved.Events differ from the stored events (-stored +returned):\n%s", diff)
	}
	if len(stored) != 2 || stored[0].Type != backends.EventTurnEnded || stored[1].Type != EventSessionMoved {
		t.Fatalf("events = %+v; want turn.ended, session.moved", stored)
	}
	var ended map[string]any
	if err := json.Unmarshal(stored[0].Data, &ended); err != nil {
		t.Fatal(err)
	}
	if ended["stop_reason"] != "interrupted" || ended["error"] != "host a stopped during the turn" || stored[0].Turn != n {
		t.Errorf("turn.ended = %s (turn %d); want turn %d interrupted by host a", stored[0].Data, stored[0].Turn, n)
	}
	var moved map[string]any
	if err := json.Unmarshal(stored[1].Data, &moved); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"from": "a", "to": "b", "epoch": 2.0, "reason": "failover", "interrupted_turns": []any{float64(n)},
		"checkpoint": ck, "branch_head": "agentpool/s1", "unpushed_turns": []any{float64(n)},
		"lost": fmt.Sprintf("the changes made on a after the last pushed checkpoint 0123456789ab are lost (turn %d, which never reached the shared repository)", n)}
	if diff := cmp.Diff(want, moved); diff != "" {
		t.Errorf("session.moved data (-want +got):\n%s", diff)
	}
	turn, err := b.GetTurn(ctx, "s1", n)
	if err != nil {
		t.Fatal(err)
	}
	if turn.EndedAt == nil || turn.StopReason != "interrupted" {
		t.Errorf("turn = %+v; want ended, interrupted", turn)
	}
	ag, err := b.GetAgentSession(ctx, "s1", "claude")
	if err != nil {
		t.Fatal(err)
	}
	if ag.Status != AgentCrashed {
		t.Errorf("agent status = %s; want crashed", ag.Status)
	}
	// b holds it now: its writes go through.
	if _, err := b.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "again"}); err != nil {
		t.Errorf("StartTurn by the new owner error = %v; want nil", err)
	}
}

// TestHandOverThenHold: the holder hands a session over; the target
// holds it at the next epoch and writes, the giver is fenced.
func TestHandOverThenHold(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b")
	a, b := st[0], st[1]
	mustSession(t, a, "s1")
	if _, err := b.HandOver(ctx, "s1", "a", MoveMove); !errors.Is(err, ErrFenced) {
		t.Errorf("HandOver by a host that does not hold it error = %v; want ErrFenced", err)
	}
	if _, err := a.HandOver(ctx, "s1", "", MoveMove); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("HandOver to nobody error = %v; want ErrLeaseHeld", err)
	}
	a.Append(backends.Event{Session: "s1", Type: backends.EventMessageChunk, Data: []byte(`{}`)})
	m, err := a.HandOver(ctx, "s1", "b", MoveDrain)
	if err != nil {
		t.Fatalf("HandOver() error = %v", err)
	}
	if m.From != "a" || m.Lease.Owner != "b" || m.Lease.Epoch != 2 || len(m.Events) != 1 {
		t.Errorf("HandOver() = %+v; want a to b at epoch 2 with one event", m)
	}
	if err := a.UpdateSessionStatus(ctx, "s1", SessionClosed); !errors.Is(err, ErrFenced) {
		t.Errorf("UpdateSessionStatus by the giver error = %v; want ErrFenced", err)
	}
	if err := b.UpdateSessionStatus(ctx, "s1", SessionOpen); !errors.Is(err, ErrFenced) {
		t.Errorf("UpdateSessionStatus by the target before Hold error = %v; want ErrFenced", err)
	}
	l, err := b.Hold(ctx, "s1")
	if err != nil || l.Owner != "b" || l.Epoch != 2 {
		t.Fatalf("Hold() by the target = %+v, %v; want b's at epoch 2", l, err)
	}
	if _, err := a.Hold(ctx, "s1"); !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("Hold() by the giver error = %v; want ErrFenced naming b", err)
	}
	if err := b.UpdateSessionStatus(ctx, "s1", SessionOpen); err != nil {
		t.Errorf("UpdateSessionStatus by the target after Hold error = %v; want nil", err)
	}
	// The event a queued before the hand-over was written while a held
	// the session; the session.moved follows it.
	got := eventTypes(t, b, "s1")
	if !slices.Equal(got, []string{string(backends.EventMessageChunk), string(EventSessionMoved)}) {
		t.Errorf("events = %v; want a's chunk, then session.moved", got)
	}
	var moved map[string]any
	if err := json.Unmarshal(m.Events[0].Data, &moved); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"from": "a", "to": "b", "epoch": 2.0, "reason": "drain", "lost": ""}
	if diff := cmp.Diff(want, moved); diff != "" {
		t.Errorf("session.moved data (-want +got):\n%s", diff)
	}
}

// TestTakeOverFromAFrozenHolder: the holder froze in the middle of a
// transaction that locks its session's row (a daemon stopped between two
// statements of a write). The take-over is not blocked for good: its wait
// is bounded, and the database ends the frozen transaction, so a later
// attempt takes the session.
func TestTakeOverFromAFrozenHolder(t *testing.T) {
	ctx := context.Background()
	loc := testEngines[1].db(t, Config{})
	a, _ := openTest(t, at(loc, Config{HostID: "a", LeaseTTL: 2 * time.Second}))
	b, _ := openTest(t, at(loc, Config{HostID: "b", LeaseTTL: 2 * time.Second}))
	mustSession(t, a, "s1")
	expireLease(t, b, "s1")
	frozen, err := a.db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Rollback()
	var id string
	if err := frozen.GetContext(ctx, &id, `SELECT id FROM sessions WHERE id = ? FOR NO KEY UPDATE`, "s1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := b.TakeOver(ctx, "s1")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TakeOver while the old holder's transaction hangs: %v after 20 s", err)
		}
	}
	if l, err := b.GetLease(ctx, "s1"); err != nil || l.Owner != "b" {
		t.Errorf("lease after the take-over = %+v, %v; want b's", l, err)
	}
}

// TestTakeOverLosesNothingSaysSo: a session whose owner died idle, its
// last turn's checkpoint pushed (or that never ran a turn), is taken over
// with no loss reported.
func TestTakeOverLosesNothingSaysSo(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b")
	a, b := st[0], st[1]
	mustSession(t, a, "s1")
	mustSession(t, a, "s2")
	n, err := a.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.EndTurn(ctx, "s1", n, TurnEnd{StopReason: "end_turn"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.RecordPushed(ctx, "s1", "agentpool/s1", "0123456789abcdef0123"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s2"} {
		expireLease(t, a, id)
		m, err := b.TakeOver(ctx, id)
		if err != nil {
			t.Fatalf("TakeOver(%s) error = %v", id, err)
		}
		var moved map[string]any
		if err := json.Unmarshal(m.Events[len(m.Events)-1].Data, &moved); err != nil {
			t.Fatal(err)
		}
		if moved["lost"] != "" || len(moved["unpushed_turns"].([]any)) != 0 {
			t.Errorf("%s: session.moved = %v; want nothing lost", id, moved)
		}
	}
}
