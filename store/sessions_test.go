package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/google/go-cmp/cmp"
)

func TestSessionCRUD(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		s, _ := openTest(t, e.db(t, Config{Now: clock.Now}))

		created, err := s.CreateSession(ctx, Session{ID: "s1", Repo: "/r", BaseRef: "main", Title: "fix it", ActiveAgent: "claude"})
		if err != nil {
			t.Fatalf("CreateSession(s1) error = %v", err)
		}
		want := Session{ID: "s1", Repo: "/r", BaseRef: "main", Title: "fix it", ActiveAgent: "claude",
			Status: SessionOpen, CreatedAt: clock.Now(), UpdatedAt: clock.Now()}
		if diff := cmp.Diff(want, created); diff != "" {
			t.Errorf("CreateSession(s1) (-want +got):\n%s", diff)
		}
		got, err := s.GetSession(ctx, "s1")
		if err != nil || !cmp.Equal(want, got) {
			t.Errorf("GetSession(s1) = %+v, %v; want %+v", got, err, want)
		}

		clock.Advance(time.Second)
		if _, err := s.CreateSession(ctx, Session{ID: "s1", Repo: "/other"}); !errors.Is(err, ErrExists) {
			t.Errorf("CreateSession(duplicate s1) error = %v; want ErrExists", err)
		}
		if _, err := s.CreateSession(ctx, Session{Repo: "/r"}); err == nil {
			t.Errorf("CreateSession(empty id) error = nil; want an error")
		}
		s2 := Session{ID: "s2", Repo: "/r2", Status: "closing", CreatedAt: clock.Now().Add(time.Hour)}
		if _, err := s.CreateSession(ctx, s2); err != nil {
			t.Fatalf("CreateSession(s2) error = %v", err)
		}

		updated := clock.Advance(time.Minute)
		if err := s.UpdateSessionStatus(ctx, "s1", SessionClosed); err != nil {
			t.Fatalf("UpdateSessionStatus(s1) error = %v", err)
		}
		if err := s.SetActiveAgent(ctx, "s1", "codex"); err != nil {
			t.Fatalf("SetActiveAgent(s1) error = %v", err)
		}
		want.Status, want.ActiveAgent, want.UpdatedAt = SessionClosed, "codex", updated
		if got, err := s.GetSession(ctx, "s1"); err != nil || !cmp.Equal(want, got) {
			t.Errorf("GetSession(s1) after updates = %+v, %v; want %+v", got, err, want)
		}

		list, err := s.ListSessions(ctx)
		if err != nil {
			t.Fatalf("ListSessions() error = %v", err)
		}
		var ids []string
		for _, l := range list {
			ids = append(ids, l.ID+":"+l.Status)
		}
		if diff := cmp.Diff([]string{"s1:closed", "s2:closing"}, ids); diff != "" {
			t.Errorf("ListSessions() (-want +got):\n%s", diff)
		}

		notFound := []struct {
			name string
			call func() error
		}{
			{"GetSession", func() error { _, err := s.GetSession(ctx, "nope"); return err }},
			{"UpdateSessionStatus", func() error { return s.UpdateSessionStatus(ctx, "nope", SessionClosed) }},
		}
		for _, nf := range notFound {
			t.Run(nf.name, func(t *testing.T) {
				if err := nf.call(); !errors.Is(err, ErrNotFound) {
					t.Errorf("%s(nope) error = %v; want ErrNotFound", nf.name, err)
				}
			})
		}
		if err := s.UpdateSessionStatus(ctx, "s1", ""); err == nil {
			t.Errorf("UpdateSessionStatus(s1, \"\") error = nil; want an error")
		}
		// SetActiveAgent is queued: an unknown session is a rejected write.
		before := s.Stats().Rejected
		if err := s.SetActiveAgent(ctx, "nope", "x"); err != nil {
			t.Errorf("SetActiveAgent(nope) error = %v; want nil (the write is queued)", err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := s.Stats().Rejected - before; got != 1 {
			t.Errorf("SetActiveAgent(nope) rejected %d writes; want 1", got)
		}
	})
}

// A session's MCP servers are kept as given, and read back.
func TestSessionMCPServers(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		s3 := Session{ID: "s3", Repo: "/r", MCPServers: `{"fs":{"command":"mcp-fs","env":{"T":"x"}}}`}
		if _, err := s.CreateSession(ctx, s3); err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetSession(ctx, "s3"); err != nil || got.MCPServers != s3.MCPServers {
			t.Errorf("GetSession(s3) MCPServers = %q, %v; want %q", got.MCPServers, err, s3.MCPServers)
		}
		if l, err := s.ListSessions(ctx); err != nil || len(l) != 1 || l[0].MCPServers != s3.MCPServers {
			t.Errorf("ListSessions() = %+v, %v", l, err)
		}
	})
}

func TestWorktreeCRUD(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		s, _ := openTest(t, e.db(t, Config{Now: clock.Now}))

		w := WorktreeRow{SessionID: "s1", Path: "/wt/s1", Branch: "agentpool/s1", BaseCommit: "abc"}
		if err := s.PutWorktree(ctx, w); !errors.Is(err, ErrNotFound) {
			t.Errorf("PutWorktree(no session) error = %v; want ErrNotFound", err)
		}
		mustSession(t, s, "s1")
		mustSession(t, s, "s2")
		if err := s.PutWorktree(ctx, w); err != nil {
			t.Fatalf("PutWorktree(s1) error = %v", err)
		}
		w.CreatedAt = clock.Now()
		if got, err := s.GetWorktree(ctx, "s1"); err != nil || !cmp.Equal(w, got) {
			t.Errorf("GetWorktree(s1) = %+v, %v; want %+v", got, err, w)
		}
		// Put again replaces the row.
		w.Path, w.BaseCommit = "/wt2/s1", "def"
		if err := s.PutWorktree(ctx, w); err != nil {
			t.Fatalf("PutWorktree(s1 again) error = %v", err)
		}
		if got, err := s.GetWorktree(ctx, "s1"); err != nil || !cmp.Equal(w, got) {
			t.Errorf("GetWorktree(s1) after replace = %+v, %v; want %+v", got, err, w)
		}
		clock.Advance(time.Second)
		w2 := WorktreeRow{SessionID: "s2", Path: "/wt/s2", Branch: "agentpool/s2", CreatedAt: clock.Now()}
		if err := s.PutWorktree(ctx, w2); err != nil {
			t.Fatalf("PutWorktree(s2) error = %v", err)
		}

		removed := clock.Advance(time.Minute)
		if err := s.MarkWorktreeRemoved(ctx, "s1"); err != nil {
			t.Fatalf("MarkWorktreeRemoved(s1) error = %v", err)
		}
		clock.Advance(time.Minute)
		if err := s.MarkWorktreeRemoved(ctx, "s1"); err != nil {
			t.Fatalf("MarkWorktreeRemoved(s1) again error = %v", err)
		}
		w.RemovedAt = &removed
		if got, err := s.GetWorktree(ctx, "s1"); err != nil || !cmp.Equal(w, got) {
			t.Errorf("GetWorktree(s1) after remove = %+v, %v; want %+v (first removal time kept)", got, err, w)
		}
		if err := s.MarkWorktreeRemoved(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("MarkWorktreeRemoved(nope) error = %v; want ErrNotFound", err)
		}
		if _, err := s.GetWorktree(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetWorktree(nope) error = %v; want ErrNotFound", err)
		}

		for _, tt := range []struct {
			includeRemoved bool
			want           []WorktreeRow
		}{
			{false, []WorktreeRow{w2}},
			{true, []WorktreeRow{w, w2}},
		} {
			got, err := s.ListWorktrees(ctx, tt.includeRemoved)
			if err != nil {
				t.Fatalf("ListWorktrees(%v) error = %v", tt.includeRemoved, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ListWorktrees(%v) (-want +got):\n%s", tt.includeRemoved, diff)
			}
		}
	})
}

// TestDeleteClosedSession: a closed session goes with everything recorded
// about it; an open one, or another session's rows, are not touched.
func TestDeleteClosedSession(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		for _, id := range []string{"gone", "kept", "open"} {
			mustSession(t, s, id)
			if err := s.PutWorktree(ctx, WorktreeRow{SessionID: id, Path: "/wt/" + id, Branch: "agentpool/" + id}); err != nil {
				t.Fatal(err)
			}
			n, err := s.StartTurn(ctx, Turn{SessionID: id, Agent: "a", Prompt: "p"})
			if err != nil {
				t.Fatal(err)
			}
			s.Append(backends.Event{Session: id, Seq: 1, Turn: n, Type: "turn.started"})
			if err := s.InsertPermission(ctx, PermissionRow{ID: "perm-" + id, SessionID: id, Turn: n}); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{"gone", "kept"} {
			if err := s.UpdateSessionStatus(ctx, id, SessionClosed); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.DeleteClosedSession(ctx, "open"); !errors.Is(err, ErrNotFound) {
			t.Errorf("DeleteClosedSession(open) error = %v; want ErrNotFound", err)
		}
		if err := s.DeleteClosedSession(ctx, "gone"); err != nil {
			t.Fatalf("DeleteClosedSession(gone) error = %v", err)
		}
		if err := s.DeleteClosedSession(ctx, "gone"); !errors.Is(err, ErrNotFound) {
			t.Errorf("DeleteClosedSession(gone) twice error = %v; want ErrNotFound", err)
		}
		for _, tt := range []struct {
			id   string
			want int
		}{{"gone", 0}, {"kept", 1}, {"open", 1}} {
			for _, table := range []string{"sessions", "session_worktrees", "turns", "events", "permissions"} {
				col := "session_id"
				if table == "sessions" {
					col = "id"
				}
				var n int
				if err := s.db.GetContext(ctx, &n, `SELECT count(*) FROM `+table+` WHERE `+col+` = ?`, tt.id); err != nil {
					t.Fatal(err)
				}
				if n != tt.want {
					t.Errorf("rows of %s in %s = %d; want %d", tt.id, table, n, tt.want)
				}
			}
		}
	})
}

// A session and its worktree are stored together or not at all.
func TestCreateSessionWorktree(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		s, _ := openTest(t, e.db(t, Config{Now: clock.Now}))

		w := WorktreeRow{SessionID: "s1", Path: "/wt/s1", Branch: "agentpool/s1", BaseCommit: "abc"}
		created, err := s.CreateSessionWorktree(ctx, Session{ID: "s1", Repo: "/r", ActiveAgent: "claude"}, w)
		if err != nil || created.ID != "s1" || created.Status != SessionOpen {
			t.Fatalf("CreateSessionWorktree(s1) = %+v, %v", created, err)
		}
		w.CreatedAt = clock.Now()
		if got, err := s.GetWorktree(ctx, "s1"); err != nil || !cmp.Equal(w, got) {
			t.Errorf("GetWorktree(s1) = %+v, %v; want %+v", got, err, w)
		}
		// The id is taken: neither row is written, the worktree of s1
		// stays as it was.
		other := WorktreeRow{SessionID: "s1", Path: "/wt/other", Branch: "agentpool/other"}
		if _, err := s.CreateSessionWorktree(ctx, Session{ID: "s1", Repo: "/r2"}, other); !errors.Is(err, ErrExists) {
			t.Errorf("CreateSessionWorktree(s1 again) error = %v; want ErrExists", err)
		}
		if got, err := s.GetWorktree(ctx, "s1"); err != nil || !cmp.Equal(w, got) {
			t.Errorf("GetWorktree(s1) after the refused create = %+v, %v; want %+v", got, err, w)
		}
		if got, err := s.GetSession(ctx, "s1"); err != nil || got.Repo != "/r" {
			t.Errorf("GetSession(s1) after the refused create = %+v, %v; want repo /r", got, err)
		}
		// A worktree of another session is refused before anything is
		// written.
		if _, err := s.CreateSessionWorktree(ctx, Session{ID: "s2", Repo: "/r"}, WorktreeRow{SessionID: "s3", Path: "/wt/s3", Branch: "b"}); err == nil {
			t.Error("CreateSessionWorktree(s2 with the worktree of s3) = nil error")
		}
		for _, id := range []string{"s2", "s3"} {
			if _, err := s.GetSession(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("GetSession(%s) error = %v; want ErrNotFound", id, err)
			}
		}
	})
}
