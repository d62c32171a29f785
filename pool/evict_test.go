package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// backendOf returns the pool's backend of (session, agent), if any.
func backendOf(p *pool.Pool, session, agent string) (pool.AgentStatus, bool) {
	for _, b := range p.Backends() {
		if b.Session == session && b.Agent == agent {
			return b, true
		}
	}
	return pool.AgentStatus{}, false
}

func TestEvict(t *testing.T) {
	slow := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "x"}, {WaitCancel: true}}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(echo), "slow": providerEntry(slow)}, nil)
	ctx := context.Background()
	cold := false // no warm-up: the agent is not started until a prompt
	s, err := e.p.Create(ctx, pool.CreateRequest{Repo: e.repo, Agent: "fake", Warm: &cold})
	if err != nil {
		t.Fatal(err)
	}

	if err := e.p.Evict(ctx, s.ID, "fake"); !errors.Is(err, pool.ErrNotFound) {
		t.Errorf("Evict(cold agent) error = %v; want ErrNotFound", err)
	}
	if err := e.p.Evict(ctx, "s-nosuchsession", "fake"); !errors.Is(err, pool.ErrNotFound) {
		t.Errorf("Evict(unknown session) error = %v; want ErrNotFound", err)
	}

	// An idle agent stops and leaves the pool; the session stays open.
	e.prompt(s.ID, "", "a")
	b, ok := backendOf(e.p, s.ID, "fake")
	if !ok || b.State != pool.StateIdle || b.PID == 0 {
		t.Fatalf("backend after a turn = %+v, %v; want idle with a pid", b, ok)
	}
	if err := e.p.Evict(ctx, s.ID, "fake"); err != nil {
		t.Fatalf("Evict(idle) error = %v; want nil", err)
	}
	waitUntil(t, "the evicted backend to leave the pool", func() bool { _, ok := backendOf(e.p, s.ID, "fake"); return !ok })
	if n := e.p.Stats().Evictions; n != 1 {
		t.Errorf("Stats().Evictions = %d; want 1", n)
	}
	var reason string
	for _, ev := range e.events(s.ID) {
		if ev.Type == "agent.evicted" {
			var d struct{ Reason string }
			_ = json.Unmarshal(ev.Data, &d)
			reason = d.Reason
		}
	}
	if reason != "evicted on request" {
		t.Errorf("agent.evicted reason = %q; want %q", reason, "evicted on request")
	}
	if got, err := e.p.Get(ctx, s.ID); err != nil || got.Status == pool.StatusClosed {
		t.Errorf("Get after Evict = %+v, %v; want the session open", got, err)
	}
	// The next prompt starts the agent again.
	if tn := e.prompt(s.ID, "", "b"); tn.StopReason != "end_turn" {
		t.Errorf("turn after Evict = %+v; want end_turn", tn)
	}
	if _, ok := backendOf(e.p, s.ID, "fake"); !ok {
		t.Error("no backend after the next prompt; want the agent warm again")
	}

	// A busy agent is refused and keeps running its turn.
	tn, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Agent: "slow", Text: "x"})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "slow busy", func() bool { b, _ := backendOf(e.p, s.ID, "slow"); return b.State == pool.StateBusy })
	if err := e.p.Evict(ctx, s.ID, "slow"); !errors.Is(err, pool.ErrBusy) {
		t.Errorf("Evict(busy) error = %v; want ErrBusy", err)
	}
	if b, _ := backendOf(e.p, s.ID, "slow"); b.State != pool.StateBusy {
		t.Errorf("after a refused Evict the backend is %q; want busy", b.State)
	}
	if err := e.p.Cancel(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if r, err := e.p.WaitTurn(ctx, s.ID, tn.ID); err != nil || r.StopReason != "cancelled" {
		t.Errorf("the busy agent's turn = %+v, %v; want it cancelled, not cut off", r, err)
	}
}

func TestEvictAfterShutdown(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, nil)
	s := e.session("fake")
	e.prompt(s.ID, "", "a")
	p := e.p
	e.shutdown()
	if err := p.Evict(context.Background(), s.ID, "fake"); !errors.Is(err, pool.ErrClosed) {
		t.Errorf("Evict after Shutdown error = %v; want ErrClosed", err)
	}
}
