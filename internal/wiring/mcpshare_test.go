package wiring

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/mcpshare"
	"github.com/agentpool/agentpool/mcpshare/mcpsharetest"
	"github.com/agentpool/agentpool/pool"
)

// launched is one agent a test launched, with what it emitted.
type launched struct {
	b      backends.Backend
	events []backends.Event
}

// TestSharedMCPForEveryKindOfAgent: agents that take http servers, agents
// that take stdio ones only, and both in one session, all reach one copy
// of a shareable stdio server (http, or the relay); a server marked
// "shared": false is started by each agent itself; the mcp event says
// which and why; stopping the agents releases their credentials.
func TestSharedMCPForEveryKindOfAgent(t *testing.T) {
	sharedDir, ownDir := t.TempDir(), t.TempDir()
	m, err := mcpshare.New(mcpshare.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	exe, _ := os.Executable()
	l := Launcher{MCP: m, RelayCommand: exe}
	no := false
	own := mcpsharetest.Definition(ownDir, "own", 0)
	own.Shared = &no
	servers := backends.MCPServers{"shared": mcpsharetest.Definition(sharedDir, "shared", 0), "own": own}
	script := func(http bool) agenttest.Script {
		return agenttest.Script{MCPHTTP: http, Turns: []agenttest.Turn{{Steps: []agenttest.Step{
			{MCPCall: &agenttest.MCPCall{Tool: "echo", Args: map[string]any{"text": "hi"}}}}}}}
	}
	type launch struct{ session, agent string }
	launches := []launch{{"s-http", "fake-http"}, {"s-stdio", "fake-stdio"}, {"s-both", "fake-http"}, {"s-both", "fake-stdio"}}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var agents []*launched
	defer func() {
		for _, a := range agents {
			_ = a.b.Stop(ctx)
		}
	}()
	pids := map[string]bool{}
	for _, ln := range launches {
		spec := agenttest.Spec(ln.agent, script(ln.agent == "fake-http"))
		spec.Dir = t.TempDir()
		spec.MCPServers = servers
		a := &launched{}
		b, err := l.Launch(pool.LaunchRequest{Spec: spec, Session: ln.session,
			Worktree: pool.Worktree{Session: ln.session, Path: spec.Dir}, Emit: func(ev backends.Event) { a.events = append(a.events, ev) }})
		if err != nil {
			t.Fatal(err)
		}
		a.b = b
		agents = append(agents, a)
		if _, err := b.Start(ctx, ""); err != nil {
			t.Fatalf("%v: start: %v", ln, err)
		}
		var chunks []string
		if _, err := b.Prompt(ctx, backends.Prompt{Text: "call", Turn: 1}, func(ev backends.Event) {
			var c backends.ChunkData
			if ev.Type == backends.EventMessageChunk && json.Unmarshal(ev.Data, &c) == nil {
				chunks = append(chunks, c.Text)
			}
		}); err != nil {
			t.Fatal(err)
		}
		wantVia := backends.MCPViaRelay
		wantTransport := "stdio"
		if ln.agent == "fake-http" {
			wantVia, wantTransport = backends.MCPHTTP, "http"
		}
		calls := map[string]agenttest.MCPCalled{}
		for _, c := range chunks {
			if r, ok := agenttest.ParseMCPCalled(c); ok {
				calls[r.Name] = r
			}
		}
		sh := calls["shared"]
		if sh.Error != "" || sh.Transport != wantTransport || !strings.HasPrefix(sh.Text, "shared pid=") || !strings.HasSuffix(sh.Text, ": hi") {
			t.Errorf("%v: the shared server answered %+v; want its echo over %s", ln, sh, wantTransport)
		}
		pid, _, _ := strings.Cut(sh.Text, ":")
		pids[pid] = true
		if o := calls["own"]; o.Error != "" || o.Transport != "stdio" || !strings.HasPrefix(o.Text, "own pid=") {
			t.Errorf("%v: its own server answered %+v; want its echo over stdio", ln, o)
		}
		var data backends.MCPData
		for _, ev := range a.events {
			if ev.Type == backends.EventMCP {
				_ = json.Unmarshal(ev.Data, &data)
			}
		}
		want := []backends.MCPSharing{{Name: "own", Reason: `marked "shared": false`}, {Name: "shared", Shared: true, Via: wantVia}}
		if got, _ := json.Marshal(data.Sharing); string(got) != mustJSON(want) {
			t.Errorf("%v: mcp event sharing = %s; want %s", ln, got, mustJSON(want))
		}
		raw, _ := json.Marshal(a.events)
		if strings.Contains(string(raw), "Bearer ") || credentialRE.Match(raw) {
			t.Errorf("%v: an event carries a credential: %s", ln, raw)
		}
	}
	if n := mcpsharetest.Instances(sharedDir); n != 1 {
		t.Errorf("shared server instances = %d; want 1", n)
	}
	if len(pids) != 1 {
		t.Errorf("the shared server answered from %v; want one process", pids)
	}
	if n := mcpsharetest.Instances(ownDir); n != len(launches) {
		t.Errorf("own-copy server instances = %d; want %d (one per agent)", n, len(launches))
	}
	st := m.Stats()
	if len(st) != 1 || st[0].Clients != len(launches) || st[0].Calls != int64(len(launches)) {
		t.Fatalf("Stats = %+v; want one server with %d clients and calls", st, len(launches))
	}
	for _, a := range agents {
		_ = a.b.Stop(ctx)
	}
	if st := m.Stats(); st[0].Clients != 0 {
		t.Errorf("clients after the agents stopped = %d; want 0 (their credentials released)", st[0].Clients)
	}
}

// A server that names the session's files is never shared, and says why.
func TestUnsharedRules(t *testing.T) {
	wt := "/data/worktrees/s-1"
	yes := true
	for _, tc := range []struct {
		s    backends.MCPServer
		want string
	}{
		{backends.MCPServer{Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-memory"}}, ""},
		{backends.MCPServer{Command: "npx", Args: []string{"server-filesystem", "."}}, `args[1] "." is a relative path`},
		{backends.MCPServer{Command: "srv", Args: []string{"--root=./src"}}, `args[0] "--root=./src" is a relative path`},
		{backends.MCPServer{Command: "srv", Args: []string{wt + "/docs"}}, "is inside the session's worktree"},
		{backends.MCPServer{Command: "srv", Env: map[string]string{"ROOT": wt}}, "env.ROOT"},
		{backends.MCPServer{Command: "srv", Args: []string{"/srv/data"}, Shared: &yes}, ""},
		{backends.MCPServer{Type: "http", URL: "http://x"}, "not a stdio server"},
	} {
		got := tc.s.Unshared(wt)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("Unshared(%+v) = %q; want %q", tc.s, got, tc.want)
		}
	}
}

func mustJSON(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}

// credentialRE matches a credential of the Manager's (64 hex digits).
var credentialRE = regexp.MustCompile(`[0-9a-f]{64}`)
