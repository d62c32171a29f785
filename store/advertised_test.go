package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

func TestAgentAdvertisedSurvivesUpsertsAndReopen(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		loc := e.db(t, Config{})
		s, _ := openTest(t, at(loc, Config{}))
		mustSession(t, s, "s1")
		a := AgentSession{SessionID: "s1", Agent: "fake", Kind: "acp", Status: AgentIdle}
		if err := s.UpsertAgentSession(ctx, a); err != nil {
			t.Fatalf("UpsertAgentSession error = %v", err)
		}
		if got, err := s.AgentAdvertised(ctx, "s1", "fake"); err != nil || got != nil {
			t.Fatalf("AgentAdvertised before any = %s, %v; want nil, nil", got, err)
		}
		adv := json.RawMessage(`{"current_mode":"plan"}`)
		if err := s.SetAgentAdvertised(ctx, "s1", "fake", adv); err != nil {
			t.Fatalf("SetAgentAdvertised error = %v", err)
		}
		// A status change or a new process rewrites the row, never what the
		// agent advertised.
		a.Status, a.PID = AgentCrashed, 42
		if err := s.UpsertAgentSession(ctx, a); err != nil {
			t.Fatalf("UpsertAgentSession again error = %v", err)
		}
		if err := s.SetAgentStatus(ctx, "s1", "fake", AgentClosed); err != nil {
			t.Fatalf("SetAgentStatus error = %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close error = %v", err)
		}
		s2, _ := openTest(t, at(loc, Config{}))
		if got, err := s2.AgentAdvertised(ctx, "s1", "fake"); err != nil || string(got) != string(adv) {
			t.Errorf("AgentAdvertised after upserts and reopen = %s, %v; want %s", got, err, adv)
		}
		if err := s2.SetAgentAdvertised(ctx, "s1", "nobody", adv); !errors.Is(err, ErrNotFound) {
			t.Errorf("SetAgentAdvertised(unknown agent) error = %v; want ErrNotFound", err)
		}
		if err := s2.SetAgentAdvertised(ctx, "s1", "fake", json.RawMessage(`[1]`)); err == nil {
			t.Errorf("SetAgentAdvertised(not an object) error = nil; want an error")
		}
	})
}
