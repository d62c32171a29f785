package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPushedHeldIsFenced: the ledger of what was pushed is read under the
// lease: with the epoch held, and refused to a host that lost the
// session (so that it pushes nothing of it).
func TestPushedHeldIsFenced(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b")
	a, b := st[0], st[1]
	mustSession(t, a, "s1")
	if err := a.RecordPushed(ctx, "s1", "agentpool/s1", "0123456789abcdef0123"); err != nil {
		t.Fatal(err)
	}
	br, ck, epoch, err := a.PushedHeld(ctx, "s1")
	if err != nil || br != "agentpool/s1" || ck != "0123456789abcdef0123" || epoch != 1 {
		t.Fatalf("PushedHeld() = %q %q %d, %v; want the record at epoch 1", br, ck, epoch, err)
	}
	expireLease(t, a, "s1")
	if _, err := b.TakeOver(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := a.PushedHeld(ctx, "s1"); !errors.Is(err, ErrFenced) {
		t.Errorf("PushedHeld() by the host that lost the session error = %v; want ErrFenced", err)
	}
	if _, _, epoch, err := b.PushedHeld(ctx, "s1"); err != nil || epoch != 2 {
		t.Errorf("PushedHeld() by the new owner = epoch %d, %v; want 2", epoch, err)
	}
	if _, _, _, err := b.PushedHeld(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("PushedHeld(unknown) error = %v; want ErrNotFound", err)
	}
}

// TestHoldHanded: a session handed to a host is held and renewed there
// by HoldHanded, with no load of it; RenewLeases keeps it; it is not
// expired for the other hosts. OwnedCount counts it.
func TestHoldHanded(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b")
	a, b := st[0], st[1]
	mustSession(t, a, "s1")
	mustSession(t, a, "s2")
	if _, err := a.HandOver(ctx, "s1", "b", MoveMove); err != nil {
		t.Fatal(err)
	}
	if b.Holds("s1") {
		t.Fatal("b holds s1 before HoldHanded")
	}
	got, err := b.HoldHanded(ctx)
	if err != nil || len(got) != 1 || got[0].Session != "s1" || got[0].Owner != "b" || got[0].Epoch != 2 {
		t.Fatalf("HoldHanded() = %+v, %v; want s1 at epoch 2", got, err)
	}
	if !b.Holds("s1") {
		t.Error("b does not hold s1 after HoldHanded")
	}
	if again, err := b.HoldHanded(ctx); err != nil || len(again) != 0 {
		t.Errorf("HoldHanded() again = %+v, %v; want nothing new", again, err)
	}
	if lost, err := b.RenewLeases(ctx); err != nil || len(lost) != 0 {
		t.Errorf("RenewLeases() = %v, %v; want s1 kept", lost, err)
	}
	if _, _, epoch, err := b.PushedHeld(ctx, "s1"); err != nil || epoch != 2 {
		t.Errorf("PushedHeld() = epoch %d, %v; want 2", epoch, err)
	}
	for _, h := range []struct {
		s    *Store
		want int
	}{{a, 1}, {b, 1}} {
		if n, err := h.s.OwnedCount(ctx); err != nil || n != h.want {
			t.Errorf("OwnedCount() of %s = %d, %v; want %d", h.s.HostID(), n, err, h.want)
		}
	}
}

// TestTakeOverNamesUnpushedTurns: a turn that ended on the old host but
// whose checkpoint was not pushed yet is named, with the cut one, as
// never having reached the shared repository; those pushed are not.
func TestTakeOverNamesUnpushedTurns(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b")
	a, b := st[0], st[1]
	mustSession(t, a, "s1")
	var turns []int64
	for i, tree := range []string{"tree-1", "tree-2", "tree-3"} {
		n, err := a.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: fmt.Sprint("p", i)})
		if err != nil {
			t.Fatal(err)
		}
		turns = append(turns, n)
		if err := a.EndTurn(ctx, "s1", n, TurnEnd{StopReason: "end_turn", CheckpointAfter: tree}); err != nil {
			t.Fatal(err)
		}
	}
	cut, err := a.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "cut"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Turn 1's checkpoint reached the remote; 2 and 3 ended after.
	if err := a.RecordPushedTree(ctx, "s1", "agentpool/s1", "c0ffee", "tree-1"); err != nil {
		t.Fatal(err)
	}
	expireLease(t, a, "s1")
	m, err := b.TakeOver(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var moved map[string]any
	if err := json.Unmarshal(m.Events[len(m.Events)-1].Data, &moved); err != nil {
		t.Fatal(err)
	}
	want := []any{float64(turns[1]), float64(turns[2]), float64(cut)}
	if diff := cmp.Diff(want, moved["unpushed_turns"]); diff != "" {
		t.Errorf("unpushed_turns (-want +got):\n%s", diff)
	}
	if lost := fmt.Sprint(moved["lost"]); !strings.Contains(lost, fmt.Sprintf("turns %d, %d, %d", turns[1], turns[2], cut)) {
		t.Errorf("lost = %q; want it to name turns %d, %d and %d", lost, turns[1], turns[2], cut)
	}
}
