package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentpool/agentpool/backends"
)

// hostsOn opens one store per host id on one new PostgreSQL database,
// as the daemons of a cluster would; the stores lease sessions.
func hostsOn(t *testing.T, ids ...string) []*Store {
	t.Helper()
	loc := testEngines[1].db(t, Config{})
	out := make([]*Store, len(ids))
	for i, id := range ids {
		out[i], _ = openTest(t, at(loc, Config{HostID: id}))
		if !out[i].Leasing() {
			t.Fatalf("store of host %q on PostgreSQL: Leasing() = false; want true", id)
		}
	}
	return out
}

// expireLease makes the lease of session run out at once, by the
// database's clock: what a host that stopped renewing it comes to.
func expireLease(t *testing.T, s *Store, session string) {
	t.Helper()
	if _, err := s.db.ExecContext(context.Background(), `UPDATE sessions SET lease_expires = `+dbNowSQL+` - 1 WHERE id = ?`, session); err != nil {
		t.Fatalf("expire lease of %q: %v", session, err)
	}
}

// mustFlush flushes s or fails the test.
func mustFlush(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatalf("Flush() error = %v", err)
	}
}

// eventTypes returns the types of the events of session, in seq order.
func eventTypes(t *testing.T, s *Store, session string) []string {
	t.Helper()
	evs, err := s.Events(context.Background(), session, 0, 0)
	if err != nil {
		t.Fatalf("Events(%q) error = %v", session, err)
	}
	out := []string{}
	for _, ev := range evs {
		out = append(out, string(ev.Type))
	}
	return out
}

// TestFencedStoreWritesNothing: once host b took a session over from
// host a, every write a makes for it, queued or direct, is refused with
// ErrFenced and stores nothing, while b's writes go through.
func TestFencedStoreWritesNothing(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b")
	a, b := st[0], st[1]
	mustSession(t, a, "s1")
	if err := a.PutWorktree(ctx, WorktreeRow{SessionID: "s1", Path: "/wt/a", Branch: "agentpool/s1"}); err != nil {
		t.Fatalf("PutWorktree by the holder error = %v; want nil", err)
	}
	expireLease(t, a, "s1")
	if _, err := b.TakeOver(ctx, "s1"); err != nil {
		t.Fatalf("TakeOver() error = %v; want nil", err)
	}
	before := eventTypes(t, b, "s1")
	// b runs a turn: a must not be able to end it.
	n, err := b.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "b's"})
	if err != nil {
		t.Fatalf("StartTurn by the new holder error = %v; want nil", err)
	}
	// b's agent and permission request, which a must not change either.
	if err := b.UpsertAgentSession(ctx, AgentSession{SessionID: "s1", Agent: "codex", Status: AgentActive}); err != nil {
		t.Fatal(err)
	}
	if err := b.InsertPermission(ctx, PermissionRow{ID: "p0", SessionID: "s1", Agent: "codex", Action: "edit"}); err != nil {
		t.Fatal(err)
	}

	a.Append(backends.Event{Session: "s1", Type: backends.EventMessageChunk, Data: []byte(`{"text":"stale"}`)})
	if _, err := a.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "a's"}); !errors.Is(err, ErrFenced) {
		t.Errorf("StartTurn by the fenced host error = %v; want ErrFenced", err)
	}
	if err := a.EndTurnEvent(ctx, n, TurnEnd{StopReason: "end_turn"}, backends.Event{Session: "s1", Turn: n,
		Type: backends.EventTurnEnded, Data: []byte(`{}`)}, nil); err != nil {
		t.Fatalf("EndTurnEvent() error = %v; want nil (queued)", err)
	}
	if err := a.SetActiveAgent(ctx, "s1", "stale-agent"); err != nil {
		t.Fatalf("SetActiveAgent() error = %v; want nil (queued)", err)
	}
	mustFlush(t, a)
	direct := map[string]error{
		"UpdateSessionStatus":  a.UpdateSessionStatus(ctx, "s1", SessionClosed),
		"PutWorktree":          a.PutWorktree(ctx, WorktreeRow{SessionID: "s1", Path: "/wt/stale"}),
		"MarkWorktreeRemoved":  a.MarkWorktreeRemoved(ctx, "s1"),
		"UpsertAgentSession":   a.UpsertAgentSession(ctx, AgentSession{SessionID: "s1", Agent: "claude", Status: AgentIdle}),
		"RecordPushed":         a.RecordPushed(ctx, "s1", "agentpool/s1", "deadbeef"),
		"PutTurnUsage":         a.PutTurnUsage(ctx, TurnUsage{SessionID: "s1", Turn: n, Agent: "claude", Total: 5}),
		"InsertPermission":     a.InsertPermission(ctx, PermissionRow{ID: "p1", SessionID: "s1", Agent: "claude", Action: "edit"}),
		"ResolvePermission":    a.ResolvePermission(ctx, "p0", PermissionDecision{Decision: "allow", DecidedBy: "a"}),
		"SetAgentStatus":       a.SetAgentStatus(ctx, "s1", "codex", AgentClosed),
		"SetAgentMode":         a.SetAgentMode(ctx, "s1", "codex", "plan"),
		"SetAgentConfigOption": a.SetAgentConfigOption(ctx, "s1", "codex", "model", "x"),
		"SetAgentAdvertised":   a.SetAgentAdvertised(ctx, "s1", "codex", []byte(`{"modes":[]}`)),
		"PutAgentUsage":        a.PutAgentUsage(ctx, AgentUsage{SessionID: "s1", Agent: "codex", ContextUsed: 1}),
		"SetSessionBudget":     a.SetSessionBudget(ctx, "s1", Budget{Tokens: &n}),
		"PutReview":            a.PutReview(ctx, Review{Session: "s1", Turn: n, Summary: "stale"}),
		"RememberPermission":   a.RememberPermission(ctx, RememberedPermission{SessionID: "s1", Agent: "claude", Action: "edit", OptionKind: "allow_always"}),
		"ForgetPermissions":    a.ForgetPermissions(ctx, "s1"),
	}
	for name, err := range direct {
		if !errors.Is(err, ErrFenced) {
			t.Errorf("%s by the fenced host error = %v; want ErrFenced", name, err)
		} else if !strings.Contains(err.Error(), `"b"`) {
			t.Errorf("%s by the fenced host error = %v; want it to name the owner b", name, err)
		}
	}

	if got := eventTypes(t, b, "s1"); !slices.Equal(got, before) {
		t.Errorf("events of s1 = %v; want only b's %v", got, before)
	}
	turns, err := b.ListTurns(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 1 || turns[0].Number != n || turns[0].EndedAt != nil {
		t.Errorf("turns of s1 = %+v; want b's turn %d alone, still running", turns, n)
	}
	sess, err := b.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if sess.Status != SessionOpen || sess.ActiveAgent == "stale-agent" {
		t.Errorf("session = %+v; want it open and untouched by a", sess)
	}
	wt, err := b.GetWorktree(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if wt.Path != "/wt/a" || wt.RemovedAt != nil || wt.Host != "a" {
		t.Errorf("worktree = %+v; want a's first row, on host a, not removed", wt)
	}
	if br, ck, _ := b.Pushed(ctx, "s1"); br != "" || ck != "" {
		t.Errorf("Pushed() = %q, %q; want nothing recorded", br, ck)
	}
	if agents, _ := b.ListAgentSessions(ctx, "s1"); len(agents) != 1 || agents[0].Status != AgentActive || agents[0].Mode != "" ||
		len(agents[0].ConfigOptions) != 0 {
		t.Errorf("agents of s1 = %+v; want b's codex alone, untouched", agents)
	}
	if adv, _ := b.AgentAdvertised(ctx, "s1", "codex"); adv != nil {
		t.Errorf("AgentAdvertised() = %s; want nothing", adv)
	}
	if perms, _ := b.ListPermissions(ctx, "s1"); len(perms) != 1 || perms[0].Decision != "" {
		t.Errorf("permissions of s1 = %+v; want b's p0 alone, undecided", perms)
	}
	if u, _ := b.ListAgentUsage(ctx, "s1"); len(u) != 0 {
		t.Errorf("agent usage of s1 = %+v; want none", u)
	}
	if _, ok, _ := b.SessionBudget(ctx, "s1"); ok {
		t.Errorf("SessionBudget() found one; want none")
	}
	if r, _ := b.Reviews(ctx, "s1"); len(r) != 0 {
		t.Errorf("Reviews() = %+v; want none", r)
	}
	// The holder's own writes go through.
	if err := b.UpdateSessionStatus(ctx, "s1", "open"); err != nil {
		t.Errorf("UpdateSessionStatus by the holder error = %v; want nil", err)
	}
	if err := b.RecordPushed(ctx, "s1", "agentpool/s1", "cafe"); err != nil {
		t.Errorf("RecordPushed by the holder error = %v; want nil", err)
	}
}

// TestClaimOwnFencesThePreviousRun: a host that starts again claims its
// sessions at the next epoch (and those leased to nobody); its previous
// run, should it still write, is fenced.
func TestClaimOwnFencesThePreviousRun(t *testing.T) {
	ctx := context.Background()
	loc := testEngines[1].db(t, Config{})
	old, _ := openTest(t, at(loc, Config{HostID: "a"}))
	mustSession(t, old, "s1")
	// A session stored before leases: leased to nobody.
	if _, err := old.db.ExecContext(ctx, `INSERT INTO sessions (`+sessionCols+`) VALUES ('s0', '/r', '', '', '', 'open', 1, 1, '')`); err != nil {
		t.Fatal(err)
	}
	restarted, _ := openTest(t, at(loc, Config{HostID: "a"}))
	claimed, err := restarted.ClaimOwn(ctx)
	if err != nil {
		t.Fatalf("ClaimOwn() error = %v", err)
	}
	got := map[string]int64{}
	for _, l := range claimed {
		got[l.Session] = l.Epoch
		if l.Owner != "a" {
			t.Errorf("claimed lease %+v; want owner a", l)
		}
	}
	if diff := cmp.Diff(map[string]int64{"s0": 1, "s1": 2}, got); diff != "" {
		t.Errorf("ClaimOwn() epochs (-want +got):\n%s", diff)
	}
	if err := old.UpdateSessionStatus(ctx, "s1", SessionClosed); !errors.Is(err, ErrFenced) {
		t.Errorf("UpdateSessionStatus by the previous run error = %v; want ErrFenced", err)
	}
	old.Append(backends.Event{Session: "s1", Type: backends.EventMessageChunk, Data: []byte(`{}`)})
	mustFlush(t, old)
	if got := eventTypes(t, restarted, "s1"); len(got) != 0 {
		t.Errorf("events of s1 = %v; want none from the previous run", got)
	}
	// Nor can it hold the session again at the new epoch.
	if _, err := old.Hold(ctx, "s1"); !errors.Is(err, ErrFenced) {
		t.Errorf("Hold() by the previous run error = %v; want ErrFenced", err)
	}
	if err := restarted.UpdateSessionStatus(ctx, "s1", SessionClosed); err != nil {
		t.Errorf("UpdateSessionStatus by the new run error = %v; want nil", err)
	}
	// Another host claims nothing of a's.
	other, _ := openTest(t, at(loc, Config{HostID: "b"}))
	if l, err := other.ClaimOwn(ctx); err != nil || len(l) != 0 {
		t.Errorf("ClaimOwn() by host b = %+v, %v; want nothing", l, err)
	}
}

// TestRenewLeasesReportsLost: a lease taken over is reported lost by
// the next renewal, once; the others are renewed.
func TestRenewLeasesReportsLost(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b")
	a, b := st[0], st[1]
	mustSession(t, a, "s1")
	mustSession(t, a, "s2")
	expireLease(t, a, "s1")
	expireLease(t, a, "s2")
	if _, err := b.TakeOver(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	lost, err := a.RenewLeases(ctx)
	if err != nil || !slices.Equal(lost, []string{"s1"}) {
		t.Errorf("RenewLeases() = %v, %v; want [s1]", lost, err)
	}
	if exp, _ := b.ExpiredLeases(ctx, 0); len(exp) != 0 {
		t.Errorf("ExpiredLeases() after renewal = %+v; want none (s2 renewed)", exp)
	}
	if lost, err := a.RenewLeases(ctx); err != nil || len(lost) != 0 {
		t.Errorf("second RenewLeases() = %v, %v; want nothing lost", lost, err)
	}
	if lost, err := b.RenewLeases(ctx); err != nil || len(lost) != 0 {
		t.Errorf("RenewLeases() by b = %v, %v; want nothing lost", lost, err)
	}
}

// TestRecoveryScopedToHeldSessions: a starting host's recovery reads see
// nothing of another live host's sessions: not its running turn, its
// active agent, nor its turn ended without turn.ended.
func TestRecoveryScopedToHeldSessions(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b")
	a, b := st[0], st[1]
	mustSession(t, a, "s1")
	n, err := a.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.EndTurn(ctx, "s1", n, TurnEnd{StopReason: "end_turn"}); err != nil { // no turn.ended
		t.Fatal(err)
	}
	if _, err := a.StartTurn(ctx, Turn{SessionID: "s1", Agent: "claude", Prompt: "running"}); err != nil {
		t.Fatal(err)
	}
	if err := a.UpsertAgentSession(ctx, AgentSession{SessionID: "s1", Agent: "claude", PID: 4242, Status: AgentActive}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ClaimOwn(ctx); err != nil {
		t.Fatal(err)
	}
	if rows, err := b.MarkStaleAgentSessions(ctx); err != nil || len(rows) != 0 {
		t.Errorf("MarkStaleAgentSessions() by b = %+v, %v; want nothing", rows, err)
	}
	if turns, err := b.OpenTurns(ctx); err != nil || len(turns) != 0 {
		t.Errorf("OpenTurns() by b = %+v, %v; want nothing", turns, err)
	}
	if turns, err := b.UnreportedTurnEnds(ctx); err != nil || len(turns) != 0 {
		t.Errorf("UnreportedTurnEnds() by b = %+v, %v; want nothing", turns, err)
	}
	if k, err := b.EndOpenTurns(ctx, "swept"); err != nil || k != 0 {
		t.Errorf("EndOpenTurns() by b = %d, %v; want 0", k, err)
	}
	if ag, _ := a.GetAgentSession(ctx, "s1", "claude"); ag.Status != AgentActive {
		t.Errorf("a's agent status = %s; want still active", ag.Status)
	}
	// The holder sees its own.
	if turns, err := a.OpenTurns(ctx); err != nil || len(turns) != 1 {
		t.Errorf("OpenTurns() by a = %+v, %v; want its running turn", turns, err)
	}
	if turns, err := a.UnreportedTurnEnds(ctx); err != nil || len(turns) != 1 {
		t.Errorf("UnreportedTurnEnds() by a = %+v, %v; want its turn %d", turns, err, n)
	}
	if rows, err := a.MarkStaleAgentSessions(ctx); err != nil || len(rows) != 1 {
		t.Errorf("MarkStaleAgentSessions() by a = %+v, %v; want its agent", rows, err)
	}
}

// TestLeasesWithoutLeasing: on SQLite (and on PostgreSQL without a
// HostID) the host owns every session: the lease methods do nothing,
// writes are not fenced; the pushed checkpoint, the worktree's host and
// the host's token digest are stored on both engines.
func TestLeasesWithoutLeasing(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{HostID: "solo"}))
		if e.postgres {
			// The same database without a HostID: no leasing there.
			s2, _ := openTest(t, at(s.cfg, Config{}))
			if s2.Leasing() {
				t.Errorf("Leasing() without HostID = true; want false")
			}
		} else if s.Leasing() {
			t.Errorf("Leasing() on SQLite = true; want false")
		}
		mustSession(t, s, "s1")
		if err := s.PutWorktree(ctx, WorktreeRow{SessionID: "s1", Path: "/wt"}); err != nil {
			t.Fatal(err)
		}
		if wt, err := s.GetWorktree(ctx, "s1"); err != nil || wt.Host != "solo" {
			t.Errorf("GetWorktree() = %+v, %v; want host solo", wt, err)
		}
		if err := s.RecordPushed(ctx, "s1", "agentpool/s1", "abc"); err != nil {
			t.Fatalf("RecordPushed() error = %v", err)
		}
		if br, ck, err := s.Pushed(ctx, "s1"); err != nil || br != "agentpool/s1" || ck != "abc" {
			t.Errorf("Pushed() = %q, %q, %v; want agentpool/s1, abc", br, ck, err)
		}
		if _, _, err := s.Pushed(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Pushed(unknown) error = %v; want ErrNotFound", err)
		}
		if l, err := s.Hold(ctx, "s1"); err != nil || l.Owner != "solo" {
			t.Errorf("Hold() = %+v, %v; want owned by solo", l, err)
		}
		if _, err := s.GetLease(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetLease(unknown) error = %v; want ErrNotFound", err)
		}
		if e.postgres {
			return // the rest is SQLite's: one host
		}
		if l, err := s.ClaimOwn(ctx); err != nil || l != nil {
			t.Errorf("ClaimOwn() = %v, %v; want nothing", l, err)
		}
		if l, err := s.RenewLeases(ctx); err != nil || l != nil {
			t.Errorf("RenewLeases() = %v, %v; want nothing", l, err)
		}
		if l, err := s.ExpiredLeases(ctx, 0); err != nil || l != nil {
			t.Errorf("ExpiredLeases() = %v, %v; want nothing", l, err)
		}
		if _, err := s.TakeOver(ctx, "s1"); !errors.Is(err, ErrLeaseHeld) {
			t.Errorf("TakeOver() error = %v; want ErrLeaseHeld", err)
		}
		if _, err := s.HandOver(ctx, "s1", "other", MoveMove); !errors.Is(err, ErrLeaseHeld) {
			t.Errorf("HandOver() error = %v; want ErrLeaseHeld", err)
		}
		s.Release("s1")
		if err := s.UpdateSessionStatus(ctx, "s1", SessionClosed); err != nil {
			t.Errorf("UpdateSessionStatus() error = %v; want nil", err)
		}
	})
}

// TestHostTokenDigest: PutHost stores the host's token digest and
// ListHosts returns it, on both engines.
func TestHostTokenDigest(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		const digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
		if err := s.PutHost(ctx, Host{ID: "h1", Advertise: "http://127.0.0.1:1", TokenSHA256: digest}); err != nil {
			t.Fatal(err)
		}
		hs, err := s.ListHosts(ctx)
		if err != nil || len(hs) != 1 || hs[0].TokenSHA256 != digest {
			t.Errorf("ListHosts() = %+v, %v; want h1 with its token digest", hs, err)
		}
	})
}

// TestAdoptSessionLeased: a session adopted from a spare is leased to the
// host at epoch 1 and held, its worktree recorded on the host.
func TestAdoptSessionLeased(t *testing.T) {
	ctx := context.Background()
	st := hostsOn(t, "a", "b")
	a, b := st[0], st[1]
	err := a.AdoptSession(ctx, Session{ID: "s1", Repo: "/r"}, WorktreeRow{SessionID: "s1", Path: "/wt/s1"},
		AgentSession{SessionID: "s1", Agent: "claude", Status: AgentIdle}, nil)
	if err != nil {
		t.Fatalf("AdoptSession() error = %v", err)
	}
	if l, err := b.GetLease(ctx, "s1"); err != nil || l.Owner != "a" || l.Epoch != 1 || l.Expires.Year() < 2000 {
		t.Errorf("GetLease() = %+v, %v; want a's at epoch 1", l, err)
	}
	if wt, err := b.GetWorktree(ctx, "s1"); err != nil || wt.Host != "a" {
		t.Errorf("GetWorktree() = %+v, %v; want on host a", wt, err)
	}
	if err := a.SetAgentStatus(ctx, "s1", "claude", AgentActive); err != nil {
		t.Errorf("SetAgentStatus by the holder error = %v; want nil", err)
	}
	if err := b.SetAgentStatus(ctx, "s1", "claude", AgentClosed); !errors.Is(err, ErrFenced) {
		t.Errorf("SetAgentStatus by another host error = %v; want ErrFenced", err)
	}
}
