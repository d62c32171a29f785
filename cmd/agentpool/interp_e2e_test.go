package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
)

// systemPython is the interpreter of the Python agent: the system's, not
// a version manager's shim (itself a script in the home).
const systemPython = "/usr/bin/python3"

// pythonAgent copies testdata/agent.py to dir/agent.py, outside every
// grant of the sandbox, and returns its path.
func pythonAgent(t *testing.T, dir string) string {
	t.Helper()
	if _, err := os.Stat(systemPython); err != nil {
		agenttest.RequireFeature(t, false, systemPython+" (the interpreter of the Python agent)")
	}
	b, err := os.ReadFile(filepath.Join("testdata", "agent.py"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "agent.py")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeProviders writes providers.json with the given providers.
func (f *confineFixture) writeProviders(t *testing.T, providers map[string]any) {
	t.Helper()
	b, _ := json.MarshalIndent(map[string]any{"version": 1, "providers": providers}, "", "  ")
	if err := os.WriteFile(filepath.Join(f.home, providersFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// prompt opens a session of agent and runs one prompt; it returns the
// session, the turn's error ("" when it ended normally) and its events.
func (f *confineFixture) prompt(t *testing.T, d *daemon, agent string) (string, string, []backends.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: f.repo, Agent: agent})
	if err != nil {
		t.Fatalf("create session: %v\ndaemon log:\n%s", err, d.out)
	}
	turn, err := d.client.Prompt(ctx, s.ID, agent, "hello", true)
	msg := turn.Error
	if err != nil {
		msg = err.Error()
	} else if turn.StopReason != "end_turn" && msg == "" {
		msg = "stop reason " + turn.StopReason
	}
	evs, err := d.client.EventLog(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s.ID, msg, evs
}

// provider returns provider id of the daemon's snapshot.
func provider(t *testing.T, d *daemon, id string) registry.ProviderStatus {
	t.Helper()
	snap, err := d.client.Providers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p, ok := snap.Provider(id)
	if !ok {
		t.Fatalf("no provider %q", id)
	}
	return p
}

// sandboxEvents returns the data of the session's sandbox.refused events.
func sandboxEvents(evs []backends.Event) []backends.SandboxEventData {
	var out []backends.SandboxEventData
	for _, ev := range evs {
		var d backends.SandboxEventData
		if ev.Type == backends.EventSandboxRefused && json.Unmarshal(ev.Data, &d) == nil {
			out = append(out, d)
		}
	}
	return out
}

// TestInterpreterAgentStartsConfined: an agent that is a Python script
// outside every grant ("python3 /x/agent.py") can read its script under
// the sandbox, and answers.
func TestInterpreterAgentStartsConfined(t *testing.T) {
	f := newConfineFixture(t)
	script := pythonAgent(t, filepath.Join(filepath.Dir(f.home), "opt", "pyagent"))
	f.writeProviders(t, map[string]any{"py": map[string]any{"extends": "acp", "command": []string{systemPython, script}}})
	d := f.start(t)
	_, msg, evs := f.prompt(t, d, "py")
	if msg != "" {
		t.Fatalf("prompt of the Python agent: %s\ndaemon log:\n%s", msg, d.out)
	}
	said := false
	for _, ev := range evs {
		var c backends.ChunkData
		if ev.Type == backends.EventMessageChunk && json.Unmarshal(ev.Data, &c) == nil && c.Text == "hello from python" {
			said = true
		}
	}
	if !said {
		t.Errorf("the Python agent's answer is not among the session's events")
	}
	if p := provider(t, d, "py"); len(p.SandboxNotes) > 0 || p.LastLaunch != nil {
		t.Errorf("provider py: notes %+v, last launch %+v; want none", p.SandboxNotes, p.LastLaunch)
	}
}

// TestSandboxRefusalsAreShown: a provider whose "sandbox.read" names a
// secret and the main checkout is told why each is refused, in the
// provider's status (GET /v1/providers, providers list) and in the
// session's events; the agent still runs.
func TestSandboxRefusalsAreShown(t *testing.T) {
	f := newConfineFixture(t)
	script := pythonAgent(t, filepath.Join(filepath.Dir(f.home), "opt", "pyagent"))
	f.writeProviders(t, map[string]any{"peek": map[string]any{"extends": "acp", "command": []string{systemPython, script},
		"sandbox": map[string]any{"read": []string{"~/.ssh", f.repo}}}})
	d := f.start(t)
	ssh := filepath.Join(f.fakeHome, ".ssh")
	p := provider(t, d, "peek")
	if len(p.SandboxNotes) != 1 || p.SandboxNotes[0].Path != ssh || p.SandboxNotes[0].Entry != backends.EntryRead ||
		!strings.Contains(p.SandboxNotes[0].Reason, "is a secret") {
		t.Errorf("provider peek's sandbox notes = %+v; want ~/.ssh refused as a secret", p.SandboxNotes)
	}
	_, msg, evs := f.prompt(t, d, "peek")
	if msg != "" {
		t.Fatalf("prompt: %s\ndaemon log:\n%s", msg, d.out)
	}
	refused := func(notes []backends.SandboxNote) bool {
		for _, n := range notes {
			if n.Path == f.repo && strings.Contains(n.Reason, "is the main checkout") && n.Fix != "" {
				return true
			}
		}
		return false
	}
	sev := sandboxEvents(evs)
	if len(sev) == 0 || !refused(sev[0].Refused) {
		t.Errorf("the session's sandbox.refused events = %+v; want the main checkout %s refused", sev, f.repo)
	}
	if l := provider(t, d, "peek").LastLaunch; l == nil || !refused(l.Refused) {
		t.Errorf("provider peek's last launch = %+v; want the main checkout refused", l)
	}
	out, err := d.cli("providers", "list")
	if err != nil {
		t.Fatalf("providers list: %v\n%s", err, out)
	}
	t.Logf("providers list:\n%s", out)
	for _, want := range []string{"refused sandbox.read " + ssh + ": is a secret: ~/.ssh", "sandbox.read " + f.repo + ": is the main checkout"} {
		if !strings.Contains(out, want) {
			t.Errorf("providers list lacks %q:\n%s", want, out)
		}
	}
}

// TestStartDeniedNamesTheEntry: an agent that cannot read a file its
// command line names fails to start with an error that names the path
// and the "sandbox.read" entry to add; the provider's status says so too.
func TestStartDeniedNamesTheEntry(t *testing.T) {
	f := newConfineFixture(t)
	base := filepath.Dir(f.home)
	script := pythonAgent(t, filepath.Join(base, "opt", "pyagent"))
	conf := filepath.Join(base, "conf", "agent.json")
	if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.writeProviders(t, map[string]any{"conf": map[string]any{"extends": "acp", "command": []string{systemPython, script, "--config", conf}}})
	d := f.start(t)
	_, msg, evs := f.prompt(t, d, "conf")
	t.Logf("start error:\n%s", msg)
	want := `add "` + filepath.Dir(conf) + `" to the provider's "sandbox.read"`
	if !strings.Contains(msg, conf) || !strings.Contains(msg, want) {
		t.Fatalf("prompt error = %q; want it to name %s and say %s", msg, conf, want)
	}
	sev := sandboxEvents(evs)
	if len(sev) == 0 || len(sev[len(sev)-1].Denied) == 0 || sev[len(sev)-1].Denied[0].Path != conf {
		t.Errorf("the session's sandbox.refused events = %+v; want %s denied", sev, conf)
	}
	if l := provider(t, d, "conf").LastLaunch; l == nil || len(l.Denied) != 1 || l.Denied[0].Grant != filepath.Dir(conf) || l.Denied[0].Entry != backends.EntryRead {
		t.Errorf("provider conf's last launch = %+v; want %s denied, to add to sandbox.read", l, conf)
	}
	out, err := d.cli("providers", "list")
	t.Logf("providers list:\n%s", out)
	if err != nil || !strings.Contains(out, "denied at start") || !strings.Contains(out, conf) {
		t.Errorf("providers list (%v) does not show the denied path:\n%s", err, out)
	}
}

// TestScriptInTheDaemonHomeIsRefused: a script inside the daemon's home is
// never granted; the provider's status says so before any session, and
// the start fails with the launcher's reason, not an unrelated error.
func TestScriptInTheDaemonHomeIsRefused(t *testing.T) {
	f := newConfineFixture(t)
	script := pythonAgent(t, filepath.Join(f.home, "agents"))
	f.writeProviders(t, map[string]any{"inhome": map[string]any{"extends": "acp", "command": []string{systemPython, script}}})
	d := f.start(t)
	p := provider(t, d, "inhome")
	if len(p.SandboxNotes) != 1 || p.SandboxNotes[0].Path != script || !strings.Contains(p.SandboxNotes[0].Reason, "lies inside the daemon's home") {
		t.Errorf("provider inhome's sandbox notes = %+v; want its script refused inside the daemon's home", p.SandboxNotes)
	}
	_, msg, _ := f.prompt(t, d, "inhome")
	t.Logf("start error:\n%s", msg)
	if !strings.Contains(msg, "sandbox: "+script) || !strings.Contains(msg, "cannot be granted") || !strings.Contains(msg, "exit status 77") {
		t.Errorf("prompt error = %q; want the sandbox's note of %s, which cannot be granted, and the launcher's exit status 77", msg, script)
	}
}

// TestTurnDeniedNamesTheEntry: an agent that crashes in a turn because it
// cannot write its state ends the turn with an error that names the path
// and the "sandbox.write" entry to add.
func TestTurnDeniedNamesTheEntry(t *testing.T) {
	f := newConfineFixture(t)
	base := filepath.Dir(f.home)
	script := pythonAgent(t, filepath.Join(base, "opt", "pyagent"))
	state := filepath.Join(base, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	f.writeProviders(t, map[string]any{"writer": map[string]any{"extends": "acp", "command": []string{systemPython, script, "--write", filepath.Join(state, "out.txt")}}})
	d := f.start(t)
	_, msg, _ := f.prompt(t, d, "writer")
	t.Logf("turn error:\n%s", msg)
	if want := `add "` + state + `" to the provider's "sandbox.write"`; !strings.Contains(msg, want) {
		t.Errorf("turn error = %q; want %s", msg, want)
	}
	if l := provider(t, d, "writer").LastLaunch; l == nil || len(l.Denied) != 1 || l.Denied[0].Entry != backends.EntryWrite {
		t.Errorf("provider writer's last launch = %+v; want %s denied, to add to sandbox.write", l, state)
	}
}
