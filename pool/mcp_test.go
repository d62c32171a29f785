package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// lastMCPEcho returns the servers the fake agent said it received in the
// last MCP echo of the session's events.
func lastMCPEcho(t *testing.T, evs []backends.Event) []agenttest.MCPReceived {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type != backends.EventMessageChunk {
			continue
		}
		var c backends.ChunkData
		_ = json.Unmarshal(evs[i].Data, &c)
		if got, err := agenttest.ParseMCPEcho(c.Text); err == nil {
			return got
		}
	}
	t.Fatal("no MCP echo in the session's events")
	return nil
}

// A session's agent gets its provider's MCP servers and the session's, the
// session's winning by name; the session shows them redacted, its events
// name them and carry no secret; a restarted daemon resumes the agent with
// session/load and passes them again.
func TestSessionMCPServers(t *testing.T) {
	entry := providerEntry(agenttest.Script{LoadSession: true, MCPHTTP: true,
		Turns: []agenttest.Turn{{Steps: []agenttest.Step{{MCPEcho: true}}}}})
	entry["mcp_servers"] = map[string]any{
		"shared":  map[string]any{"command": "provider-shared", "env": map[string]string{"SHARED_KEY": "provider-secret-1"}},
		"builtin": map[string]any{"command": "provider-only", "args": []string{"-x"}},
	}
	e := newEnv(t, map[string]any{"fake": entry}, nil)
	ctx := context.Background()
	sessionServers := backends.MCPServers{
		"shared": {Command: "session-shared", Env: map[string]string{"SHARED_KEY": "session-secret-2"}},
		"remote": {Type: backends.MCPHTTP, URL: "https://mcp.example/x", Headers: map[string]string{"Authorization": "Bearer session-secret-3"}},
	}
	s, err := e.p.Create(ctx, pool.CreateRequest{Repo: e.repo, Agent: "fake", MCPServers: sessionServers, Warm: new(bool)})
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"provider-secret-1", "session-secret-2", "session-secret-3"}
	noSecret := func(what string, v any) {
		t.Helper()
		raw, _ := json.Marshal(v)
		for _, sec := range secrets {
			if strings.Contains(string(raw), sec) {
				t.Errorf("%s shows %q: %s", what, sec, raw)
			}
		}
	}
	noSecret("Create's session", s)
	if got := s.MCPServers["remote"].Headers["Authorization"]; got != backends.Redacted {
		t.Errorf("session shows remote's header as %q, want %q", got, backends.Redacted)
	}

	e.prompt(s.ID, "", "servers?")
	want := []agenttest.MCPReceived{
		{Method: "session/new", Name: "builtin", Command: "provider-only", Args: []string{"-x"}},
		{Method: "session/new", Name: "remote", Type: "http", URL: "https://mcp.example/x",
			Headers: map[string]string{"Authorization": agenttest.MCPDigest("Bearer session-secret-3")}},
		{Method: "session/new", Name: "shared", Command: "session-shared", Env: map[string]string{"SHARED_KEY": agenttest.MCPDigest("session-secret-2")}},
	}
	if got := lastMCPEcho(t, e.events(s.ID)); !reflect.DeepEqual(got, want) {
		t.Errorf("agent received %+v\nwant %+v", got, want)
	}
	got, err := e.p.Get(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	noSecret("Get", got)
	if len(got.Agents) != 1 || !slices.Equal(got.Agents[0].MCPServers, []string{"builtin", "remote", "shared"}) {
		t.Errorf("agents %+v; want fake with builtin, remote, shared", got.Agents)
	}
	noSecret("Backends", e.p.Backends())

	e.shutdown()
	e.open()
	e.prompt(s.ID, "", "again?")
	evs := e.events(s.ID)
	echo := lastMCPEcho(t, evs)
	var names []string
	for _, r := range echo {
		if r.Method != "session/load" {
			t.Errorf("after the restart %s came with %s, want session/load", r.Name, r.Method)
		}
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"builtin", "remote", "shared"}) {
		t.Errorf("after the restart the agent received %v", names)
	}
	mcpEvents := 0
	for _, ev := range evs {
		noSecret(string(ev.Type)+" event", ev)
		if ev.Type == backends.EventMCP {
			mcpEvents++
		}
		if ev.Type == backends.EventSessionCreated && !strings.Contains(string(ev.Data), `"mcp_servers":["remote","shared"]`) {
			t.Errorf("session.created does not name the session's servers: %s", ev.Data)
		}
	}
	if mcpEvents != 2 {
		t.Errorf("%d mcp events, want one per start (2)", mcpEvents)
	}
}

// A session create request with an invalid server is refused before
// anything is made, naming the field.
func TestSessionMCPServersValidated(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(agenttest.Script{})}, nil)
	_, err := e.p.Create(context.Background(), pool.CreateRequest{Repo: e.repo, Agent: "fake",
		MCPServers: backends.MCPServers{"gh": {Type: "http", URL: "ftp://x"}}})
	if !errors.Is(err, pool.ErrInvalid) || !strings.Contains(err.Error(), "mcp_servers.gh.url") {
		t.Fatalf("Create error = %v; want ErrInvalid naming mcp_servers.gh.url", err)
	}
	list, _ := e.p.List(context.Background())
	if len(list) != 0 {
		t.Errorf("a session was made: %+v", list)
	}
}
