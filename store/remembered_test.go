package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRememberedPermissions: the answers a session remembers are stored
// with it, one per (agent, action), the last answer winning; they outlive
// a reopen of the store, another session's forgetting, and go when their
// session forgets them or is deleted.
func TestRememberedPermissions(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		loc := e.db(t, Config{Now: clock.Now})
		s, _ := openTest(t, loc)
		mustSession(t, s, "s1")
		mustSession(t, s, "s2")
		at := clock.Now().Truncate(time.Microsecond)
		execAllow := RememberedPermission{SessionID: "s1", Agent: "claude", Action: "execute", OptionKind: "allow_always", RequestID: "r1", DecidedAt: at}
		editReject := RememberedPermission{SessionID: "s1", Agent: "claude", Action: "edit", OptionKind: "reject_always", RequestID: "r2", DecidedAt: at}
		other := RememberedPermission{SessionID: "s2", Agent: "gemini", Action: "execute", OptionKind: "allow_always", RequestID: "r3", DecidedAt: at}
		for _, r := range []RememberedPermission{execAllow, editReject, other} {
			if err := s.RememberPermission(ctx, r); err != nil {
				t.Fatalf("RememberPermission(%+v) error = %v; want nil", r, err)
			}
		}
		// A later answer for the same (agent, action) replaces the first.
		execReject := execAllow
		execReject.OptionKind, execReject.RequestID = "reject_always", "r4"
		if err := s.RememberPermission(ctx, execReject); err != nil {
			t.Fatalf("RememberPermission(%+v) error = %v; want nil", execReject, err)
		}
		if err := s.RememberPermission(ctx, RememberedPermission{SessionID: "nope", Agent: "a", Action: "edit", OptionKind: "allow_always"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("RememberPermission(unknown session) error = %v; want ErrNotFound", err)
		}

		s.Close()
		s, _ = openTest(t, loc)
		got, err := s.RememberedPermissions(ctx, "s1")
		if err != nil {
			t.Fatalf("RememberedPermissions(s1) after reopen error = %v", err)
		}
		if diff := cmp.Diff([]RememberedPermission{editReject, execReject}, got); diff != "" {
			t.Errorf("RememberedPermissions(s1) after reopen (-want +got):\n%s", diff)
		}

		if err := s.ForgetPermissions(ctx, "s1"); err != nil {
			t.Fatalf("ForgetPermissions(s1) error = %v", err)
		}
		if got, err := s.RememberedPermissions(ctx, "s1"); err != nil || len(got) != 0 {
			t.Errorf("RememberedPermissions(s1) after forgetting = %+v, %v; want none", got, err)
		}
		if got, err := s.RememberedPermissions(ctx, "s2"); err != nil || len(got) != 1 {
			t.Errorf("RememberedPermissions(s2) after s1 forgot = %+v, %v; want s2's one", got, err)
		}
		if err := s.ForgetPermissions(ctx, "nope"); err != nil {
			t.Errorf("ForgetPermissions(unknown session) error = %v; want nil", err)
		}

		if err := s.UpdateSessionStatus(ctx, "s2", SessionClosed); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteClosedSession(ctx, "s2"); err != nil {
			t.Fatalf("DeleteClosedSession(s2) error = %v", err)
		}
		if got, err := s.RememberedPermissions(ctx, "s2"); err != nil || len(got) != 0 {
			t.Errorf("RememberedPermissions(s2) after its deletion = %+v, %v; want none", got, err)
		}
	})
}
