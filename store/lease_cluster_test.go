package store

import (
	"context"
	"errors"
	"testing"
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
