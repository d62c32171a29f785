package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi/apitest"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
)

// fakePool is the fake of the pool.
type fakePool = apitest.Pool

var _ Pool = (*fakePool)(nil)

// eventLog is an in-memory session log with live subscribers.
type eventLog = apitest.EventLog

// newLog returns a log whose subscribers have buf slots.
func newLog(t testing.TB, buf int) *eventLog {
	log, _ := newLogSrc(t, buf)
	return log
}

// newLogSrc returns a log and the source of its subscriptions.
func newLogSrc(t testing.TB, buf int) (*eventLog, *apitest.Subscriptions) {
	t.Helper()
	src, err := apitest.NewSubscriptions()
	if err != nil {
		t.Fatalf("NewSubscriptions() error = %v", err)
	}
	return apitest.NewEventLog(src, buf), src
}

// testEnv is a Server over a fake pool and a real registry, served by
// httptest, with a Client for it.
type testEnv struct {
	pool   *fakePool
	reg    *registry.Registry
	srv    *Server
	ts     *httptest.Server
	client *Client
	token  string
	file   string
}

const testToken = "test-token-0123456789"

func newTestEnv(t testing.TB, fp *fakePool, tweak func(*Config)) *testEnv {
	t.Helper()
	file := filepath.Join(t.TempDir(), "providers.json")
	reg, err := registry.New(registry.Config{Path: file, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("registry.New() error = %v", err)
	}
	cfg := Config{Pool: fp, Registry: reg, Token: testToken, Version: "v-test", Heartbeat: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Shutdown()
		ts.Close()
		_ = reg.Close()
	})
	return &testEnv{pool: fp, reg: reg, srv: srv, ts: ts, token: cfg.Token, file: file,
		client: &Client{BaseURL: ts.URL, Token: cfg.Token, ReconnectDelay: 10 * time.Millisecond}}
}

// sessionWorld configures fp with sessions whose ids pick a failure:
// "missing" → not found, "busy", "full" → at capacity, "failing",
// "closed", "boom" → an internal error, "noturn"; any other id works.
func sessionWorld(fp *fakePool) {
	fail := func(id string) error {
		switch id {
		case "missing":
			return fmt.Errorf("session %q: %w", id, pool.ErrNotFound)
		case "busy":
			return fmt.Errorf("session %q is running turn 3: %w", id, pool.ErrBusy)
		case "full":
			return fmt.Errorf("start agent: %w", pool.ErrAtCapacity)
		case "failing":
			return fmt.Errorf("agent demo: %w", pool.ErrAgentFailing)
		case "closed":
			return fmt.Errorf("session %q: %w", id, pool.ErrClosed)
		case "boom":
			return errors.New("disk on fire")
		case "noturn":
			return fmt.Errorf("session %q has no running turn: %w", id, pool.ErrNoTurn)
		case "disabled":
			return fmt.Errorf("resolve claude: %w", registry.ErrDisabled)
		}
		return nil
	}
	sess := func(id string) pool.Session {
		return pool.Session{ID: id, Repo: "/repo", ActiveAgent: "demo", Status: pool.StatusOpen}
	}
	turn := func(id string, n int64) pool.Turn {
		return pool.Turn{ID: n, Session: id, Agent: "demo", Prompt: "hi", StartedAt: time.Unix(100, 0).UTC()}
	}
	fp.CreateFunc = func(_ context.Context, r pool.CreateRequest) (pool.Session, error) {
		if err := fail(r.ID); err != nil {
			return pool.Session{}, err
		}
		s := sess(r.ID)
		if s.ID == "" {
			s.ID = "s-new"
		}
		s.Repo, s.ActiveAgent = r.Repo, r.Agent
		return s, nil
	}
	fp.GetFunc = func(_ context.Context, id string) (pool.Session, error) { return sess(id), fail(id) }
	fp.ListFunc = func(context.Context) ([]pool.Session, error) { return []pool.Session{sess("a"), sess("b")}, nil }
	fp.CloseFunc = func(_ context.Context, id string, discard bool) (pool.CloseResult, error) {
		return pool.CloseResult{Session: id, Worktree: pool.RemoveResult{Branch: "agentpool/" + id, Committed: !discard, Discarded: discard}}, fail(id)
	}
	fp.StartPromptFunc = func(_ context.Context, r pool.PromptRequest) (pool.Turn, error) {
		return turn(r.Session, 7), fail(r.Session)
	}
	fp.WaitTurnFunc = func(ctx context.Context, id string, n int64) (pool.Turn, error) {
		t := turn(id, n)
		t.StopReason = "end_turn"
		return t, fail(id)
	}
	fp.CancelFunc = func(_ context.Context, id string) error { return fail(id) }
	fp.RetryFunc = func(_ context.Context, id string) (pool.Turn, error) { return turn(id, 8), fail(id) }
	fp.TurnsFunc = func(_ context.Context, id string) ([]pool.Turn, error) {
		return []pool.Turn{turn(id, 1), turn(id, 2)}, fail(id)
	}
	fp.AnswerFunc = func(session, request, choice string) error {
		if err := fail(session); err != nil {
			return err
		}
		if request != "r1" {
			return fmt.Errorf("answer request %q: %w", request, permission.ErrUnknownRequest)
		}
		switch choice {
		case permission.KindAllowOnce, permission.KindAllowAlways, permission.KindRejectOnce, permission.KindRejectAlways, "allow", "deny":
			return nil
		}
		return fmt.Errorf("answer request %q: %w: %q", request, permission.ErrInvalidChoice, choice)
	}
	fp.PendingFunc = func(session string) []permission.Pending {
		return []permission.Pending{{ID: "r1", Request: permission.Request{Session: session, Agent: "demo", Title: "Write x",
			Options: []permission.Option{{ID: "a", Kind: permission.KindAllowOnce}, {ID: "r", Kind: permission.KindRejectOnce}}}}}
	}
	fp.DiffFunc = func(_ context.Context, id string, n int64) (pool.Diff, error) {
		return pool.Diff{From: "base", To: fmt.Sprint(n), Files: []pool.FileChange{{Path: "a.txt", Status: "M", Additions: 1}},
			Stat: pool.DiffStat{Files: 1, Additions: 1}, Patch: "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-x\n+y\n"}, fail(id)
	}
	fp.RestoreFunc = func(_ context.Context, id string, n int64, after bool) error {
		if n > 2 {
			return fmt.Errorf("turn %d: %w", n, pool.ErrNoTurn)
		}
		return fail(id)
	}
	fp.BackendsFunc = func() []pool.AgentStatus {
		return []pool.AgentStatus{{Session: "a", Agent: "demo", Kind: backends.KindACP, State: pool.StateIdle, PID: 42, RSS: 3 << 20, IdleFor: 90 * time.Second}}
	}
	fp.StatsFunc = func() pool.Stats {
		return pool.Stats{Warm: map[string]map[string]int{"demo": {"idle": 1, "busy": 2}}, Sessions: 2, Spawns: 3, Crashes: 1,
			Evictions: 4, Turns: 5, TurnErrors: 1, EventsPublished: 99, PermissionWaits: 6,
			TurnDurations: pool.Histogram{Bounds: []float64{1, 10}, Counts: []uint64{2, 5}, Count: 5, Sum: 12.5}}
	}
}
