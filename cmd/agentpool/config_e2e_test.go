package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// configAgent is a demo-agent script that offers two modes, a model
// option with two values and two slash commands, and says in each answer
// which model and mode it runs with.
var configAgent = agenttest.Script{
	Modes: []agenttest.Mode{{ID: "default", Name: "Default"}, {ID: "plan", Name: "Plan"}},
	ConfigOptions: json.RawMessage(`[{"id":"model","name":"Model","category":"model","type":"select","currentValue":"fast",
		"options":[{"value":"fast","name":"Fast"},{"value":"smart","name":"Smart"}]}]`),
	Commands: []agenttest.Command{{Name: "help", Description: "Show help"}, {Name: "review", Description: "Review changes", Hint: "what to review"}},
	Turns:    []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "model={{config:model}} mode={{mode}}\n"}}}},
}

// modeOptionAgent offers its modes as a config option of category "mode".
var modeOptionAgent = agenttest.Script{
	ConfigOptions: json.RawMessage(`[{"id":"agent_mode","name":"Mode","category":"mode","type":"select","currentValue":"ask",
		"options":[{"value":"ask","name":"Ask"},{"value":"code","name":"Code"}]}]`),
}

// writeConfigProviders writes home's providers.json with provider "cfg",
// the demo agent playing configAgent, with config defaults, and "cfgmode"
// playing modeOptionAgent.
func writeConfigProviders(t *testing.T, home, bin string, defaults map[string]string) {
	t.Helper()
	js, err := json.Marshal(configAgent)
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"extends": "acp", "label": "cfg", "command": []string{bin, "demo-agent"},
		"env": map[string]string{"AGENTPOOL_DEMO_SCRIPT": string(js)}}
	if len(defaults) > 0 {
		cfg["config"] = defaults
	}
	jm, err := json.Marshal(modeOptionAgent)
	if err != nil {
		t.Fatal(err)
	}
	provs := map[string]any{"cfg": cfg, "cfgmode": map[string]any{"extends": "acp", "label": "cfgmode", "command": []string{bin, "demo-agent"},
		"env": map[string]string{"AGENTPOOL_DEMO_SCRIPT": string(jm)}}}
	b, err := json.MarshalIndent(map[string]any{"version": 1, "providers": provs}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, providersFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitKnown waits until the session's agent has advertised what it offers.
func (d *daemon) waitKnown(session string) pool.AgentConfig {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := d.client.AgentConfig(context.Background(), session, "cfg")
		if err == nil && c.Known && c.Running {
			return c
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("agent config never known: %+v, %v", c, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killAgentOf kills the session's running agent and waits until the pool
// has seen it die.
func (d *daemon) killAgentOf(session string) {
	d.t.Helper()
	ctx := context.Background()
	st, err := d.client.Pool(ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	pid := 0
	for _, b := range st.Backends {
		if b.Session == session {
			pid = b.PID
		}
	}
	if pid == 0 {
		d.t.Fatalf("no agent of %s in the pool: %+v", session, st.Backends)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		d.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c, err := d.client.AgentConfig(ctx, session, "cfg")
		if err == nil && !c.Running {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.t.Fatal("the killed agent still counts as running")
}

// TestEndToEndAgentConfig: through the API and the CLI, a session's agent
// lists its config options, modes and commands; a model and a mode are set
// and checked against what it offers (400 naming the valid ones); the
// provider's default model applies at start; the choices survive the
// agent being killed, and one made while it is down applies at its next
// start.
func TestEndToEndAgentConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# cfg\n"})
	writeConfigProviders(t, home, bin, map[string]string{"model": "smart"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "cfg"})
	if err != nil {
		t.Fatal(err)
	}
	c := d.waitKnown(s.ID)
	if len(c.Options) != 1 || c.Options[0].Current != "smart" {
		t.Errorf("options after start = %+v; want the provider's default model smart", c.Options)
	}

	cli := func(wantErr bool, args ...string) string {
		t.Helper()
		out, err := d.cli(args...)
		if (err != nil) != wantErr {
			t.Fatalf("agentpool %s: error %v (want error: %v)\n%s", strings.Join(args, " "), err, wantErr, out)
		}
		return out
	}
	out := cli(false, "session", "config", s.ID)
	for _, want := range []string{"OPTION", "model", "smart", "fast, smart"} {
		if !strings.Contains(out, want) {
			t.Errorf("session config output lacks %q:\n%s", want, out)
		}
	}
	if out := cli(true, "session", "config", s.ID, "model", "huge"); !strings.Contains(out, `option "model" has no value "huge" (the agent offers: fast, smart)`) {
		t.Errorf("session config with a bad value says:\n%s", out)
	}
	if out := cli(true, "session", "config", s.ID, "modle", "fast", "--agent", "cfg"); !strings.Contains(out, `unknown option "modle" (the agent offers: model)`) {
		t.Errorf("session config with an unknown option says:\n%s", out)
	}
	if out := cli(false, "session", "config", s.ID, "model", "fast"); !strings.Contains(out, "applied to the running agent") {
		t.Errorf("session config model fast says:\n%s", out)
	}
	if out := cli(false, "session", "mode", s.ID, "plan"); !strings.Contains(out, "applied") {
		t.Errorf("session mode plan says:\n%s", out)
	}
	if out := cli(false, "session", "mode", s.ID); !strings.Contains(out, "*  plan") {
		t.Errorf("session mode does not mark plan current:\n%s", out)
	}
	out = cli(false, "session", "commands", s.ID)
	for _, want := range []string{"/help", "/review", "<what to review>", "Review changes"} {
		if !strings.Contains(out, want) {
			t.Errorf("session commands output lacks %q:\n%s", want, out)
		}
	}
	if out := cli(false, "prompt", s.ID, "which?"); !strings.Contains(out, "model=fast mode=plan") {
		t.Errorf("prompt after the changes says:\n%s", out)
	}

	// The API answers 400 for what the agent does not offer and for a
	// malformed body.
	var ae *httpapi.Error
	if _, err := d.client.SetAgentConfig(ctx, s.ID, "cfg", httpapi.ConfigChange{Mode: "yolo"}); !errors.As(err, &ae) ||
		ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, `unknown mode "yolo" (the agent offers: default, plan)`) {
		t.Errorf("PUT config mode yolo error = %v; want 400 naming the modes", err)
	}
	if _, err := d.client.SetAgentConfig(ctx, s.ID, "cfg", httpapi.ConfigChange{}); !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		t.Errorf("PUT config {} error = %v; want 400", err)
	}

	// A body with a field the endpoint does not know (a model given at
	// the top level, not under "options") is refused, naming the field.
	req, err := http.NewRequest(http.MethodPut, d.client.BaseURL+"/v1/sessions/"+s.ID+"/agents/cfg/config", strings.NewReader(`{"model": "fast"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.client.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error httpapi.Error `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || body.Error.Field != "model" {
		t.Errorf("PUT config {\"model\"} = %d %+v; want 400 naming the field model", resp.StatusCode, body.Error)
	}

	// Killed, the agent keeps its choices; one made while it is down
	// applies when it starts again.
	d.killAgentOf(s.ID)
	if out := cli(false, "session", "config", s.ID, "model", "smart"); !strings.Contains(out, "not running: stored") {
		t.Errorf("session config while the agent is down says:\n%s", out)
	}
	if c, err := d.client.AgentConfig(ctx, s.ID, "cfg"); err != nil || !c.Known || c.Chosen.Options["model"] != "smart" || c.Chosen.Mode != "plan" {
		t.Errorf("config while the agent is down = %+v, %v; want known, chosen smart and plan", c, err)
	}
	if out := cli(false, "prompt", s.ID, "after"); !strings.Contains(out, "model=smart mode=plan") {
		t.Errorf("prompt after the restart says:\n%s", out)
	}

	// An agent whose modes are a config option: session mode lists and
	// sets them through it.
	s2, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "cfgmode"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for c, err := d.client.AgentConfig(ctx, s2.ID, "cfgmode"); err != nil || !c.Known; c, err = d.client.AgentConfig(ctx, s2.ID, "cfgmode") {
		if time.Now().After(deadline) {
			t.Fatalf("cfgmode config never known: %+v, %v", c, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out := cli(false, "session", "mode", s2.ID); !strings.Contains(out, "*  ask") || !strings.Contains(out, "code") {
		t.Errorf("session mode of the mode-option agent says:\n%s", out)
	}
	cli(false, "session", "mode", s2.ID, "code")
	if out := cli(false, "session", "mode", s2.ID); !strings.Contains(out, "*  code") {
		t.Errorf("session mode after switching to code says:\n%s", out)
	}
}
