package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
)

// configScript is a fake agent that offers two modes, a model option with
// two values and slash commands, and says in every answer which model and
// mode it runs with; its turns announce one more command.
var configScript = agenttest.Script{
	Modes: []agenttest.Mode{{ID: "default", Name: "Default"}, {ID: "plan", Name: "Plan"}},
	ConfigOptions: json.RawMessage(`[{"id":"model","name":"Model","category":"model","type":"select","currentValue":"fast",
		"options":[{"value":"fast","name":"Fast"},{"value":"smart","name":"Smart","description":"slower, better"}]}]`),
	Commands: []agenttest.Command{{Name: "help", Description: "Show help"}, {Name: "review", Description: "Review changes", Hint: "what to review"}},
	Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{Chunk: "model={{config:model}} mode={{mode}}"},
		{Update: json.RawMessage(`{"sessionUpdate":"available_commands_update","availableCommands":[
			{"name":"help","description":"Show help"},{"name":"review","description":"Review changes","input":{"hint":"what to review"}},
			{"name":"compact","description":"Compact the conversation"}]}`)},
	}}},
}

// turnText is the agent text of a session's turn n.
func (e *env) turnText(session string, n int64) string {
	e.t.Helper()
	var b strings.Builder
	for _, ev := range e.events(session) {
		if ev.Type != backends.EventMessageChunk || ev.Turn != n {
			continue
		}
		var d backends.ChunkData
		if json.Unmarshal(ev.Data, &d) == nil && d.Role == backends.RoleAgent {
			b.WriteString(d.Text)
		}
	}
	return b.String()
}

func commandNames(cs []backends.Command) string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return strings.Join(names, ",")
}

// killAgent kills the session's agent process and waits until the pool has
// seen it end.
func (e *env) killAgent(session, agent string) {
	e.t.Helper()
	pid := 0
	for _, b := range e.p.Backends() {
		if b.Session == session && b.Agent == agent {
			pid = b.PID
		}
	}
	if pid == 0 {
		e.t.Fatalf("no running agent %q in session %s", agent, session)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		e.t.Fatal(err)
	}
	waitUntil(e.t, "agent crashed", func() bool { return e.agentState(session, agent) == pool.StateCrashed })
}

// TestAgentConfigShowsSetsAndSurvivesRestarts: what the agent advertises is
// readable (running, after it crashed, and after a daemon restart); a mode
// and a model set through the pool reach the agent, are checked against
// what it offers, and are re-applied when it restarts; the provider's
// default model is applied at start and a default it does not offer is
// reported.
func TestAgentConfigShowsSetsAndSurvivesRestarts(t *testing.T) {
	entry := providerEntry(configScript)
	entry["config"] = map[string]string{"model": "smart", "effort": "high"}
	e := newEnv(t, map[string]any{"fake": entry}, nil)
	ctx := context.Background()
	s := e.session("fake")
	if got := e.turnText(s.ID, e.prompt(s.ID, "", "hi").ID); got != "model=smart mode=default" {
		t.Errorf("first turn says %q; want the provider's default model: model=smart mode=default", got)
	}
	var reported bool
	for _, ev := range e.events(s.ID) {
		reported = reported || ev.Type == backends.EventError && strings.Contains(string(ev.Data), `provider default \"effort\"`)
	}
	if !reported {
		t.Errorf("no error event for the default \"effort\" the agent does not offer")
	}

	c, err := e.p.AgentConfig(ctx, s.ID, "")
	if err != nil {
		t.Fatalf("AgentConfig error = %v", err)
	}
	if !c.Known || !c.Running || c.Agent != "fake" || c.Modes.Current != "default" || len(c.Modes.Available) != 2 {
		t.Errorf("AgentConfig = %+v; want known, running, modes default of 2", c)
	}
	if len(c.Options) != 1 || c.Options[0].ID != "model" || c.Options[0].Current != "smart" || len(c.Options[0].Choices) != 2 {
		t.Errorf("AgentConfig options = %+v; want model at smart with 2 choices", c.Options)
	}
	// The turn's available_commands_update is kept.
	if got := commandNames(c.Commands); got != "help,review,compact" {
		t.Errorf("AgentConfig commands = %s; want help,review,compact", got)
	}
	if c.Commands[1].Hint != "what to review" {
		t.Errorf("command review = %+v; want its input hint", c.Commands[1])
	}

	bad := []struct {
		ch   pool.ConfigChange
		want string
	}{
		{pool.ConfigChange{Mode: "yolo"}, `unknown mode "yolo" (the agent offers: default, plan)`},
		{pool.ConfigChange{Options: map[string]string{"modle": "fast"}}, `unknown option "modle" (the agent offers: model)`},
		{pool.ConfigChange{Options: map[string]string{"model": "huge"}}, `option "model" has no value "huge" (the agent offers: fast, smart)`},
		{pool.ConfigChange{}, "nothing to set"},
	}
	for _, b := range bad {
		if _, err := e.p.SetAgentConfig(ctx, s.ID, "", b.ch); !errors.Is(err, pool.ErrInvalid) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("SetAgentConfig(%+v) error = %v; want ErrInvalid saying %s", b.ch, err, b.want)
		}
	}

	r, err := e.p.SetAgentConfig(ctx, s.ID, "fake", pool.ConfigChange{Mode: "plan", Options: map[string]string{"model": "fast"}})
	if err != nil || !r.Applied || r.Modes.Current != "plan" || r.Options[0].Current != "fast" {
		t.Fatalf("SetAgentConfig(plan, fast) = %+v, %v; want applied, plan and fast", r, err)
	}
	if got := e.turnText(s.ID, e.prompt(s.ID, "", "again").ID); got != "model=fast mode=plan" {
		t.Errorf("turn after the change says %q; want model=fast mode=plan", got)
	}

	// Killed, the agent is still described, and its choices come back
	// when it restarts (over the provider's default model).
	e.killAgent(s.ID, "fake")
	c, err = e.p.AgentConfig(ctx, s.ID, "fake")
	if err != nil || c.Running || !c.Known || c.Options[0].Current != "fast" || c.Chosen.Mode != "plan" || c.Chosen.Options["model"] != "fast" {
		t.Errorf("AgentConfig of the crashed agent = %+v, %v; want known, not running, fast, chosen plan+fast", c, err)
	}
	if got := e.turnText(s.ID, e.prompt(s.ID, "", "after the crash").ID); got != "model=fast mode=plan" {
		t.Errorf("turn after a restart says %q; want the choices re-applied: model=fast mode=plan", got)
	}

	// A change while the agent does not run is stored and applied at
	// its next start.
	e.killAgent(s.ID, "fake")
	r, err = e.p.SetAgentConfig(ctx, s.ID, "fake", pool.ConfigChange{Mode: "default"})
	if err != nil || r.Applied || !strings.Contains(r.Note, "next start") {
		t.Fatalf("SetAgentConfig while stopped = %+v, %v; want stored, not applied", r, err)
	}
	if got := e.turnText(s.ID, e.prompt(s.ID, "", "later").ID); got != "model=fast mode=default" {
		t.Errorf("turn after a stored change says %q; want model=fast mode=default", got)
	}

	// A new daemon reads what the agent advertised from the store.
	e.shutdown()
	e.open()
	c, err = e.p.AgentConfig(ctx, s.ID, "")
	if err != nil || c.Running || !c.Known || commandNames(c.Commands) != "help,review,compact" || c.Modes.Current != "default" {
		t.Errorf("AgentConfig after a daemon restart = %+v, %v; want known from the store", c, err)
	}
}

// TestAgentConfigBeforeTheAgentStarted: nothing is known of an agent that
// never ran, and a change cannot be checked, so it is refused.
func TestAgentConfigBeforeTheAgentStarted(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(configScript)}, nil)
	ctx := context.Background()
	s := e.create("fake", false)
	c, err := e.p.AgentConfig(ctx, s.ID, "")
	if err != nil || c.Known || c.Running || len(c.Options) != 0 {
		t.Errorf("AgentConfig before a start = %+v, %v; want nothing known", c, err)
	}
	if _, err := e.p.SetAgentConfig(ctx, s.ID, "", pool.ConfigChange{Mode: "plan"}); !errors.Is(err, pool.ErrNotAdvertised) {
		t.Errorf("SetAgentConfig before a start error = %v; want ErrNotAdvertised", err)
	}
	if _, err := e.p.AgentConfig(ctx, s.ID, "nosuch"); !errors.Is(err, registry.ErrUnknown) {
		t.Errorf("AgentConfig(unknown agent) error = %v; want registry.ErrUnknown", err)
	}
}

// TestModeAsConfigOption: an agent that offers its modes as a config
// option of category "mode" (and no session modes) gets the provider's
// default mode and a mode set through the pool on that option.
func TestModeAsConfigOption(t *testing.T) {
	script := agenttest.Script{
		ConfigOptions: json.RawMessage(`[{"id":"agent_mode","name":"Mode","category":"mode","type":"select","currentValue":"ask",
			"options":[{"value":"ask","name":"Ask"},{"value":"code","name":"Code"}]}]`),
		Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "mode={{config:agent_mode}}"}}}},
	}
	entry := providerEntry(script)
	entry["config"] = map[string]string{"mode": "code"}
	e := newEnv(t, map[string]any{"fake": entry}, nil)
	ctx := context.Background()
	s := e.session("fake")
	if got := e.turnText(s.ID, e.prompt(s.ID, "", "hi").ID); got != "mode=code" {
		t.Errorf("first turn says %q; want the provider's default mode=code", got)
	}
	r, err := e.p.SetAgentConfig(ctx, s.ID, "", pool.ConfigChange{Mode: "ask"})
	if err != nil || !r.Applied || r.Chosen.Options["agent_mode"] != "ask" {
		t.Fatalf("SetAgentConfig(mode ask) = %+v, %v; want applied to option agent_mode", r, err)
	}
	if got := e.turnText(s.ID, e.prompt(s.ID, "", "again").ID); got != "mode=ask" {
		t.Errorf("turn after the change says %q; want mode=ask", got)
	}
	if _, err := e.p.SetAgentConfig(ctx, s.ID, "", pool.ConfigChange{Mode: "yolo"}); !errors.Is(err, pool.ErrInvalid) ||
		!strings.Contains(err.Error(), `option "agent_mode" has no value "yolo" (the agent offers: ask, code)`) {
		t.Errorf("SetAgentConfig(mode yolo) error = %v; want ErrInvalid naming ask and code", err)
	}
}
