package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/mcpshare/mcpsharetest"
	"github.com/agentpool/agentpool/pool"
)

// TestSharedMCPConfined: confined agents whose network is "none", in
// namespaces of their own, reach the daemon's one copy of a shared stdio
// MCP server: over http (an agent that takes it) and through agentpool
// mcp-relay (one that takes stdio only); the server runs once, in its
// own jail, and GET /v1/mcp/shared counts its clients and calls.
func TestSharedMCPConfined(t *testing.T) {
	t.Run("namespaces", func(t *testing.T) { testSharedMCPConfined(t, false) })
	// Under Landlock alone (a machine without user namespaces), the
	// shared servers' port is the one port a "none" agent may connect to.
	t.Run("landlock only", func(t *testing.T) { testSharedMCPConfined(t, true) })
}

func testSharedMCPConfined(t *testing.T, noNamespaces bool) {
	if noNamespaces {
		t.Setenv("AGENTPOOL_TEST_NO_NAMESPACES", "1")
	}
	f := newConfineFixture(t)
	dir := filepath.Join(f.outside, "instances")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	def := mcpsharetest.Definition(dir, "shared", 0)
	server := map[string]any{"command": def.Command, "args": def.Args, "env": def.Env,
		"sandbox": map[string]any{"write": []string{dir}}}
	sb := map[string]any{"write": []string{"~/.fake-agent"}, "network": "none"}
	provider := func(http bool) map[string]any {
		p := f.hostileProvider(t, agenttest.Script{MCPHTTP: http, Turns: []agenttest.Turn{{Steps: []agenttest.Step{
			{MCPCall: &agenttest.MCPCall{Tool: "echo", Args: map[string]any{"text": "hi"}}}}}}}, sb)
		p["mcp_servers"] = map[string]any{"fake": server}
		return p
	}
	f.writeProviders(t, map[string]any{"mcp-http": provider(true), "mcp-stdio": provider(false)})
	d := f.start(t)
	if !noNamespaces {
		agenttest.RequireFeature(t, health(t, d).Namespaces, "namespaces for agents")
	}
	pids := map[string]bool{}
	agents := []string{"mcp-http", "mcp-stdio", "mcp-http"}
	var sessions []string
	for _, agent := range agents {
		waitProviderReady(t, d, agent)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: f.repo, Agent: agent})
		cancel()
		if err != nil {
			t.Fatalf("create session: %v", err)
		}
		var got *agenttest.MCPCalled
		for _, c := range turnChunks(t, d, s.ID) {
			if r, ok := agenttest.ParseMCPCalled(c); ok {
				got = &r
			}
		}
		if got == nil || got.Error != "" || !strings.HasSuffix(got.Text, ": hi") {
			t.Fatalf("%s: the shared server through the sandbox answered %+v\ndaemon log:\n%s", agent, got, d.out)
		}
		pid, _, _ := strings.Cut(got.Text, ":")
		pids[pid] = true
		sessions = append(sessions, s.ID)
	}
	if n := mcpsharetest.Instances(dir); n != 1 || len(pids) != 1 {
		t.Errorf("server instances = %d, answering pids %v; want one", n, pids)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := d.client.MCPShares(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Clients != len(agents) || st[0].Calls != int64(len(agents)) || !st[0].Running || st[0].RSS <= 0 {
		t.Fatalf("GET /v1/mcp/shared = %+v; want one running server with %d clients and calls", st, len(agents))
	}
	out, err := d.cli("ps")
	if err != nil || !strings.Contains(out, "SHARED MCP") || !regexp.MustCompile(`(?m)^fake\s+\S+.*\s`+strconv.Itoa(st[0].PID)+`\s+3\s+3\s+0\s+1\s`).MatchString(out) {
		t.Errorf("agentpool ps = %v\n%s\nwant the shared server with its pid, 3 clients, 3 calls, 0 errors, 1 start", err, out)
	}
	metrics := d.rawGet("/metrics")
	for _, want := range []string{`agentpool_mcp_shared_calls_total{id="` + st[0].ID + `",name="fake"} 3`, `agentpool_mcp_shared_clients{id="` + st[0].ID + `",name="fake"} 3`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, mcpsharetest.EnvDir) || strings.Contains(out, mcpsharetest.EnvDir) {
		t.Errorf("the server's environment shows in ps or /metrics")
	}
	// An evicted agent's credential goes with it; the server stays for
	// the others.
	if err := d.client.Evict(ctx, sessions[1], "mcp-stdio"); err != nil {
		t.Fatalf("evict: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err = d.client.MCPShares(ctx)
		if err == nil && len(st) == 1 && st[0].Clients == len(agents)-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after an eviction GET /v1/mcp/shared = %+v, %v; want %d clients", st, err, len(agents)-1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !st[0].Running {
		t.Errorf("the server stopped with one agent evicted: %+v", st[0])
	}
}
