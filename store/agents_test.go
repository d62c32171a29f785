package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAgentSessionUpsertAndGet(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		s, _ := openTest(t, e.db(t, Config{Now: clock.Now}))
		mustSession(t, s, "s1")

		a := AgentSession{
			SessionID: "s1", Agent: "claude", Kind: "acp", AgentSessionID: "sess-abc",
			PID: 4242, PGID: 4242, StartTicks: 1<<40 + 7, Status: AgentIdle, Restarts: 0,
			ResumeSupported: true, Mode: "plan", ConfigOptions: json.RawMessage(`{"model":"opus"}`),
			SpecHash: "h1",
		}
		if err := s.UpsertAgentSession(ctx, a); err != nil {
			t.Fatalf("UpsertAgentSession(claude) error = %v", err)
		}
		created := clock.Now()
		a.CreatedAt, a.LastActiveAt = created, created
		if got, err := s.GetAgentSession(ctx, "s1", "claude"); err != nil || !cmp.Equal(a, got) {
			t.Errorf("GetAgentSession(s1, claude) = %+v, %v; want %+v", got, err, a)
		}

		// An upsert replaces everything but CreatedAt.
		later := clock.Advance(time.Minute)
		b := AgentSession{SessionID: "s1", Agent: "claude", Kind: "acp", PID: 5000, PGID: 5000, StartTicks: 99,
			Status: AgentActive, Restarts: 1, SpecHash: "h2", LastActiveAt: later, CreatedAt: later.Add(time.Hour)}
		if err := s.UpsertAgentSession(ctx, b); err != nil {
			t.Fatalf("UpsertAgentSession(claude again) error = %v", err)
		}
		b.CreatedAt = created
		if got, err := s.GetAgentSession(ctx, "s1", "claude"); err != nil || !cmp.Equal(b, got) {
			t.Errorf("GetAgentSession after upsert = %+v, %v; want %+v", got, err, b)
		}

		bad := []struct {
			name string
			a    AgentSession
			want error
		}{
			{"unknown session", AgentSession{SessionID: "nope", Agent: "x", Kind: "acp", Status: AgentIdle}, ErrNotFound},
			{"unknown status", AgentSession{SessionID: "s1", Agent: "x", Kind: "acp", Status: "warm"}, nil},
			{"options not an object", AgentSession{SessionID: "s1", Agent: "x", Kind: "acp", Status: AgentIdle,
				ConfigOptions: json.RawMessage(`["a"]`)}, nil},
		}
		for _, tt := range bad {
			t.Run(tt.name, func(t *testing.T) {
				err := s.UpsertAgentSession(ctx, tt.a)
				if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
					t.Errorf("UpsertAgentSession(%+v) error = %v; want %v", tt.a, err, tt.want)
				}
			})
		}
		if _, err := s.GetAgentSession(ctx, "s1", "x"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetAgentSession(s1, x) error = %v; want ErrNotFound", err)
		}
	})
}

func TestAgentSessionSetters(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		s, _ := openTest(t, e.db(t, Config{Now: clock.Now}))
		mustSession(t, s, "s1")
		if err := s.UpsertAgentSession(ctx, AgentSession{SessionID: "s1", Agent: "gemini", Kind: "acp", Status: AgentIdle}); err != nil {
			t.Fatal(err)
		}

		at := clock.Advance(time.Minute)
		if err := s.SetAgentStatus(ctx, "s1", "gemini", AgentActive); err != nil {
			t.Fatalf("SetAgentStatus(active) error = %v", err)
		}
		if err := s.SetAgentMode(ctx, "s1", "gemini", "yolo"); err != nil {
			t.Fatalf("SetAgentMode() error = %v", err)
		}
		for _, kv := range [][2]string{{"model", "flash"}, {"effort", "high"}, {"model", "pro"}} {
			if err := s.SetAgentConfigOption(ctx, "s1", "gemini", kv[0], kv[1]); err != nil {
				t.Fatalf("SetAgentConfigOption(%s=%s) error = %v", kv[0], kv[1], err)
			}
		}
		got, err := s.GetAgentSession(ctx, "s1", "gemini")
		if err != nil {
			t.Fatal(err)
		}
		var opts map[string]string
		if err := json.Unmarshal(got.ConfigOptions, &opts); err != nil {
			t.Fatalf("ConfigOptions %s: %v", got.ConfigOptions, err)
		}
		if got.Status != AgentActive || !got.LastActiveAt.Equal(at) || got.Mode != "yolo" ||
			!cmp.Equal(map[string]string{"model": "pro", "effort": "high"}, opts) {
			t.Errorf("after setters: status %q, last active %v, mode %q, options %v; want active, %v, yolo, model=pro effort=high",
				got.Status, got.LastActiveAt, got.Mode, opts, at)
		}

		if err := s.SetAgentStatus(ctx, "s1", "gemini", "sleeping"); err == nil {
			t.Errorf("SetAgentStatus(sleeping) error = nil; want an error")
		}
		unknown := []struct {
			name string
			call func() error
		}{
			{"SetAgentStatus", func() error { return s.SetAgentStatus(ctx, "s1", "nope", AgentIdle) }},
			{"SetAgentMode", func() error { return s.SetAgentMode(ctx, "s1", "nope", "m") }},
			{"SetAgentConfigOption", func() error { return s.SetAgentConfigOption(ctx, "s1", "nope", "k", "v") }},
		}
		for _, u := range unknown {
			t.Run(u.name, func(t *testing.T) {
				if err := u.call(); !errors.Is(err, ErrNotFound) {
					t.Errorf("%s(s1, nope) error = %v; want ErrNotFound", u.name, err)
				}
			})
		}
	})
}

func TestMarkStaleAgentSessions(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		s, _ := openTest(t, e.db(t, Config{Now: clock.Now}))
		mustSession(t, s, "s1")
		mustSession(t, s, "s2")
		rows := []AgentSession{
			{SessionID: "s1", Agent: "a-active", Kind: "acp", Status: AgentActive, PID: 11, PGID: 11, StartTicks: 111},
			{SessionID: "s1", Agent: "b-idle", Kind: "pty", Status: AgentIdle, PID: 12, PGID: 12, StartTicks: 122},
			{SessionID: "s2", Agent: "c-crashed", Kind: "acp", Status: AgentCrashed, PID: 13, PGID: 13},
			{SessionID: "s2", Agent: "d-closed", Kind: "acp", Status: AgentClosed},
			{SessionID: "s2", Agent: "e-idle", Kind: "acp", Status: AgentIdle, PID: 15, PGID: 15, StartTicks: 155},
		}
		for i, r := range rows {
			r.CreatedAt = clock.Now().Add(time.Duration(i) * time.Second)
			r.LastActiveAt = r.CreatedAt
			rows[i] = r
			if err := s.UpsertAgentSession(ctx, r); err != nil {
				t.Fatalf("UpsertAgentSession(%s) error = %v", r.Agent, err)
			}
		}
		live, err := s.ListLiveAgentSessions(ctx)
		if err != nil {
			t.Fatalf("ListLiveAgentSessions() error = %v", err)
		}
		wantLive := []AgentSession{rows[0], rows[1], rows[4]}
		if diff := cmp.Diff(wantLive, live); diff != "" {
			t.Errorf("ListLiveAgentSessions() (-want +got):\n%s", diff)
		}

		stale, err := s.MarkStaleAgentSessions(ctx)
		if err != nil {
			t.Fatalf("MarkStaleAgentSessions() error = %v", err)
		}
		if diff := cmp.Diff(wantLive, stale); diff != "" {
			t.Errorf("MarkStaleAgentSessions() returned (-want +got):\n%s", diff)
		}
		wantStatus := map[string]string{"a-active": AgentCrashed, "b-idle": AgentClosed, "c-crashed": AgentCrashed,
			"d-closed": AgentClosed, "e-idle": AgentClosed}
		for _, sid := range []string{"s1", "s2"} {
			list, err := s.ListAgentSessions(ctx, sid)
			if err != nil {
				t.Fatalf("ListAgentSessions(%s) error = %v", sid, err)
			}
			for _, a := range list {
				if a.Status != wantStatus[a.Agent] || a.SessionID != sid {
					t.Errorf("agent %s of %s: status %q; want %q", a.Agent, a.SessionID, a.Status, wantStatus[a.Agent])
				}
				delete(wantStatus, a.Agent)
			}
		}
		if len(wantStatus) != 0 {
			t.Errorf("ListAgentSessions missed %v", wantStatus)
		}
		again, err := s.MarkStaleAgentSessions(ctx)
		if err != nil || len(again) != 0 {
			t.Errorf("second MarkStaleAgentSessions() = %d rows, %v; want none", len(again), err)
		}
	})
}
