package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// TestSharedMCPRealServer: the reference "everything" MCP server from npm
// (pinned by testdata/mcpeverything's package-lock.json), run once by the
// daemon in its own jail, answers two confined agents that take stdio
// servers only, through agentpool mcp-relay. Skipped without node and npm
// (CI installs them, see .ci/run).
func TestSharedMCPRealServer(t *testing.T) {
	client := installNodeClient(t, "mcpeverything", "server.mjs") // nodeclient_test.go
	modules, err := filepath.EvalSymlinks(filepath.Join(filepath.Dir(client.Script), "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	f := newConfineFixture(t)
	server := map[string]any{"command": client.Node, "args": []string{client.Script, "stdio"},
		"sandbox": map[string]any{"read": []string{filepath.Dir(client.Script), modules}}}
	p := f.hostileProvider(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{MCPCall: &agenttest.MCPCall{Tool: "echo", Args: map[string]any{"message": "through the relay"}}}}}}},
		map[string]any{"write": []string{"~/.fake-agent"}, "network": "none"})
	p["mcp_servers"] = map[string]any{"everything": server}
	f.writeProviders(t, map[string]any{"stdio-agent": p})
	d := f.start(t)
	waitProviderReady(t, d, "stdio-agent")
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: f.repo, Agent: "stdio-agent"})
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
		if got == nil || got.Error != "" || got.Transport != "stdio" || got.Text != "Echo: through the relay" {
			t.Fatalf("the everything server through the relay answered %+v\ndaemon log:\n%s", got, d.out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := d.client.MCPShares(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Starts != 1 || st[0].Clients != 2 || st[0].Calls != 2 {
		t.Errorf("GET /v1/mcp/shared = %+v; want one server started once, with 2 clients and 2 calls", st)
	}
}
