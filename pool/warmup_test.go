package pool_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// create opens a session of agent; warm false asks for no warm-up.
func (e *env) create(agent string, warm bool) pool.Session {
	e.t.Helper()
	s, err := e.p.Create(context.Background(), pool.CreateRequest{Repo: e.repo, Agent: agent, Warm: &warm})
	if err != nil {
		e.t.Fatalf("Create(%s, warm %v): %v", agent, warm, err)
	}
	return s
}

// waitEvent waits for the session's first event of type typ and returns it.
func (e *env) waitEvent(session string, typ backends.EventType) backends.Event {
	e.t.Helper()
	var found backends.Event
	waitUntil(e.t, string(typ)+" on "+session, func() bool {
		for _, ev := range e.events(session) {
			if ev.Type == typ {
				found = ev
				return true
			}
		}
		return false
	})
	return found
}

// agentState is the state of the session's agent as Backends shows it, ""
// when the pool holds none.
func (e *env) agentState(session, agent string) string {
	for _, b := range e.p.Backends() {
		if b.Session == session && b.Agent == agent {
			return b.State
		}
	}
	return ""
}

// TestWarmUpStartsTheAgentAtCreate: a new session's agent starts without a
// prompt, saying it is a warm-up, and its first prompt uses it: one start.
func TestWarmUpStartsTheAgentAtCreate(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, nil)
	s := e.session("fake") // no Warm: on by default
	e.waitEvent(s.ID, backends.EventAgentReady)
	if st := e.agentState(s.ID, "fake"); st != pool.StateIdle {
		t.Fatalf("agent after its warm-up is %q; want %q", st, pool.StateIdle)
	}
	if tn := e.prompt(s.ID, "", "hello"); tn.StopReason != "end_turn" {
		t.Fatalf("first prompt = %+v; want it ended", tn)
	}
	evs := e.events(s.ID)
	if n := countType(evs, backends.EventAgentStarting); n != 1 {
		t.Fatalf("%d agent.starting events; want 1: %v", n, typesOf(evs))
	}
	starting := evs[indexOf(typesOf(evs), string(backends.EventAgentStarting))]
	if d := dataOf(t, starting); d["warm_up"] != true || starting.Turn != 0 {
		t.Errorf("agent.starting = turn %d, data %v; want no turn and warm_up true", starting.Turn, d)
	}
	if d := dataOf(t, evs[0]); evs[0].Type != backends.EventSessionCreated || d["warm"] != true {
		t.Errorf("first event %s %v; want session.created with warm true", evs[0].Type, d)
	}
	if st := e.p.Stats(); st.Spawns != 1 {
		t.Errorf("Stats().Spawns = %d; want 1", st.Spawns)
	}
}

// TestWarmUpOff: with warm false the agent starts at the first prompt.
func TestWarmUpOff(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, nil)
	s := e.create("fake", false)
	time.Sleep(300 * time.Millisecond) // time a warm-up would have taken to begin
	if st := e.agentState(s.ID, "fake"); st != "" {
		t.Fatalf("agent of a session created with warm false is %q; want none", st)
	}
	evs := e.events(s.ID)
	if n := countType(evs, backends.EventAgentStarting); n != 0 {
		t.Fatalf("agent.starting before any prompt: %v", typesOf(evs))
	}
	if d := dataOf(t, evs[0]); d["warm"] != false {
		t.Errorf("session.created data %v; want warm false", d)
	}
	e.prompt(s.ID, "", "hello")
	starting := e.waitEvent(s.ID, backends.EventAgentStarting)
	if starting.Turn != 1 || dataOf(t, starting)["warm_up"] != nil {
		t.Errorf("agent.starting = turn %d, data %s; want turn 1 without warm_up", starting.Turn, starting.Data)
	}
}

// TestPromptDuringWarmUpWaitsForIt: a prompt that arrives while the
// warm-up's start is in flight takes that start instead of a second one.
func TestPromptDuringWarmUpWaitsForIt(t *testing.T) {
	e := newEnv(t, map[string]any{"slow": providerEntry(agenttest.Script{InitDelayMs: 700})}, nil)
	s := e.session("slow")
	waitUntil(t, "the warm-up's start", func() bool { return e.agentState(s.ID, "slow") == pool.StateStarting })
	if tn := e.prompt(s.ID, "", "hello"); tn.StopReason != "end_turn" {
		t.Fatalf("prompt during the warm-up = %+v; want it ended", tn)
	}
	evs := e.events(s.ID)
	if n := countType(evs, backends.EventAgentStarting); n != 1 {
		t.Fatalf("%d agent.starting events; want 1: %v", n, typesOf(evs))
	}
	if n := countType(evs, pool.EventTurnQueued); n != 0 {
		t.Errorf("the prompt was queued: %v", typesOf(evs))
	}
	if st := e.p.Stats(); st.Spawns != 1 {
		t.Errorf("Stats().Spawns = %d; want 1", st.Spawns)
	}
}

// TestWarmUpTakesOnlyAFreeSlot: with no slot free a warm-up is skipped,
// with agent.warm_skipped saying why: it evicts neither a busy agent nor
// an idle one, and takes no slot a queued prompt waits for.
func TestWarmUpTakesOnlyAFreeSlot(t *testing.T) {
	e := newEnv(t, map[string]any{"slow": providerEntry(waitCancel), "fake": providerEntry(echo)},
		func(c *pool.Config) { c.MaxWarm = 1 })
	ctx := context.Background()

	// An idle agent of another session holds the only slot.
	idle := e.create("fake", false)
	e.prompt(idle.ID, "", "hello")
	s := e.create("fake", true)
	ev := e.waitEvent(s.ID, pool.EventAgentWarmSkipped)
	if r, _ := dataOf(t, ev)["reason"].(string); !strings.Contains(r, "max_warm 1") {
		t.Errorf("agent.warm_skipped reason %q; want it to name max_warm", r)
	}
	if st := e.agentState(idle.ID, "fake"); st != pool.StateIdle {
		t.Fatalf("idle agent of another session is %q after a warm-up; want it kept idle", st)
	}
	if _, err := e.p.Close(ctx, idle.ID, true); err != nil {
		t.Fatal(err)
	}

	// A busy agent holds it, and a prompt waits for it.
	busy := e.create("slow", false)
	tn, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: busy.ID, Text: "work"})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the busy turn", func() bool { return e.agentState(busy.ID, "slow") == pool.StateBusy })
	waiting := e.create("fake", false)
	queued, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: waiting.ID, Text: "next"})
	if err != nil || queued.QueuePosition != 1 {
		t.Fatalf("StartPrompt with the slot busy = %+v, %v; want it queued first", queued, err)
	}
	late := e.create("fake", true)
	ev = e.waitEvent(late.ID, pool.EventAgentWarmSkipped)
	if r, _ := dataOf(t, ev)["reason"].(string); !strings.Contains(r, "wait for a backend slot") {
		t.Errorf("agent.warm_skipped reason %q; want it to name the waiting prompt", r)
	}
	if st := e.agentState(busy.ID, "slow"); st != pool.StateBusy {
		t.Fatalf("busy agent is %q after a warm-up; want it still busy", st)
	}
	if err := e.p.Cancel(ctx, busy.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := e.p.WaitTurn(ctx, busy.ID, tn.ID); err != nil || got.StopReason != "cancelled" {
		t.Fatalf("busy turn = %+v, %v; want it cancelled", got, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if got, err := e.p.WaitTurn(wctx, waiting.ID, queued.ID); err != nil || got.StopReason != "end_turn" {
		t.Fatalf("queued turn = %+v, %v; want it run once the slot freed", got, err)
	}
	if st := e.agentState(late.ID, "fake"); st != "" {
		t.Errorf("skipped warm-up's agent is %q; want none", st)
	}
}

// TestWarmUpStoppedByClose: closing a session while its warm-up starts the
// agent stops it: no process is left, and the start is not a crash.
func TestWarmUpStoppedByClose(t *testing.T) {
	const marker = "warmup-close-agent"
	e := newEnv(t, map[string]any{"slow": providerEntry(agenttest.Script{AgentName: marker, InitDelayMs: 10_000, Grandchild: true})}, nil)
	s := e.session("slow")
	waitUntil(t, "the warm-up's agent and its grandchild", func() bool { return len(agentsMarked(marker)) == 2 })
	start := time.Now()
	if _, err := e.p.Close(context.Background(), s.ID, true); err != nil {
		t.Fatalf("Close during the warm-up: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %s; want the start cut short", d)
	}
	if pids := waitAgentsGone(marker, 2*time.Second); len(pids) > 0 {
		t.Fatalf("processes left after Close: %v", pids)
	}
	evs := e.events(s.ID)
	if n := countType(evs, backends.EventAgentReady) + countType(evs, backends.EventError); n != 0 {
		t.Errorf("a start stopped by Close reported ready or an error: %v", typesOf(evs))
	}
	if last := evs[len(evs)-1]; last.Type != backends.EventSessionClosed {
		t.Errorf("last event %s; want session.closed: %v", last.Type, typesOf(evs))
	}
	if st := e.p.Stats(); st.Crashes != 0 {
		t.Errorf("Stats().Crashes = %d; want 0", st.Crashes)
	}
}

// TestWarmUpStoppedByShutdown: shutting the pool down while a warm-up
// starts an agent leaves no process (goleak checks the goroutines).
func TestWarmUpStoppedByShutdown(t *testing.T) {
	const marker = "warmup-shutdown-agent"
	e := newEnv(t, map[string]any{"slow": providerEntry(agenttest.Script{AgentName: marker, InitDelayMs: 10_000, Grandchild: true})}, nil)
	e.session("slow")
	e.session("slow")
	waitUntil(t, "the warm-ups' agents and grandchildren", func() bool { return len(agentsMarked(marker)) == 4 })
	start := time.Now()
	e.shutdown()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Shutdown took %s; want the starts cut short", d)
	}
	if pids := waitAgentsGone(marker, 2*time.Second); len(pids) > 0 {
		t.Fatalf("processes left after Shutdown: %v", pids)
	}
}

// TestWarmUpFailureReported: an agent that fails its warm-up start fails
// no Create; the failure is on the session's stream, and the first prompt
// starts the agent again.
func TestWarmUpFailureReported(t *testing.T) {
	code := 3
	e := newEnv(t, map[string]any{"bad": providerEntry(agenttest.Script{ExitBeforeHandshake: &code})}, nil)
	s := e.session("bad")
	ev := e.waitEvent(s.ID, backends.EventError)
	if d := dataOf(t, ev); d["stage"] != "start" {
		t.Errorf("error event data %v; want stage start", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tn, err := e.p.Prompt(ctx, pool.PromptRequest{Session: s.ID, Text: "hello"})
	if err != nil && !errors.Is(err, pool.ErrAgentFailing) {
		t.Fatalf("Prompt after a failed warm-up: %v", err)
	}
	if err == nil && tn.Error == "" {
		t.Errorf("turn on an agent that cannot start = %+v; want an error", tn)
	}
	if n := countType(e.events(s.ID), backends.EventAgentStarting); n != 2 {
		t.Errorf("%d agent.starting events; want 2 (the warm-up's, the prompt's)", n)
	}
}
