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
)

// A stdio MCP server that is not shared is the agent's child: it runs in the agent's cgroup
// and in its view, so a secret is out of its reach, and a program outside
// the agent's grants cannot even start (until its directory is in
// sandbox.read), as docs/confinement.md says: neither is there to open.
func TestMCPServerRunsInTheAgentsConfinement(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	f := newConfineFixture(t)
	server := filepath.Join(f.outside, "mcp-server")
	if err := os.WriteFile(server, []byte("#!/bin/sh\necho \"server $MCP_GREETING\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, _ := json.Marshal(agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{MCPStart: true}}}}})
	entry := func(read []string) map[string]any {
		sb := map[string]any{"write": []string{"~/.fake-agent"}}
		if read != nil {
			sb["read"] = read
		}
		return map[string]any{"extends": "acp", "command": []string{f.exe},
			"env":     map[string]string{agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(script), "GORACE": "atexit_sleep_ms=0"},
			"sandbox": sb,
			"mcp_servers": map[string]any{
				// Marked, so that the agent starts them (the daemon shares
				// the others: mcpshare_e2e_test.go).
				"cgroup":  map[string]any{"command": "/bin/cat", "args": []string{"/proc/self/cgroup"}, "shared": false},
				"secret":  map[string]any{"command": "/bin/cat", "args": []string{filepath.Join(f.fakeHome, ".ssh", "id_ed25519")}, "shared": false},
				"outside": map[string]any{"command": server, "env": map[string]string{"MCP_GREETING": "hello"}, "shared": false},
			}}
	}
	f.writeProviders(t, map[string]any{"plain": entry(nil), "granted": entry([]string{f.outside})})
	d := f.start(t)
	waitProviderReady(t, d, "plain")
	run := func(agent string) (map[string]agenttest.MCPStarted, pool.Session) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: f.repo, Agent: agent})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.client.Prompt(ctx, s.ID, agent, "start your servers", true); err != nil {
			t.Fatalf("prompt: %v\n%s", err, d.out)
		}
		evs, err := d.client.EventLog(ctx, s.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]agenttest.MCPStarted{}
		for _, ev := range evs {
			var c backends.ChunkData
			if ev.Type == backends.EventMessageChunk && json.Unmarshal(ev.Data, &c) == nil {
				if r, err := agenttest.ParseMCPStarted(c.Text); err == nil {
					got[r.Name] = r
				}
			}
		}
		if s, err = d.client.Session(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		return got, s
	}

	got, s := run("plain")
	if len(s.Agents) != 1 || s.Agents[0].Confinement == nil || s.Agents[0].Confinement.Cgroup == "" {
		t.Fatalf("agent %+v; want it in a cgroup", s.Agents)
	}
	cg, v2 := got["cgroup"], ""
	for _, l := range strings.Split(cg.Output, "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			v2 = p // the cgroup v2 line, relative to the mount
		}
	}
	if cg.Error != "" || v2 == "" || v2 == "/" || !strings.HasSuffix(s.Agents[0].Confinement.Cgroup, v2) {
		t.Errorf("the server's cgroup is %q (%s); want the agent's, %s", cg.Output, cg.Error, s.Agents[0].Confinement.Cgroup)
	}
	// Neither the secret nor the server's program is in the agent's view.
	if sec := got["secret"]; sec.Error == "" || strings.Contains(sec.Output, "PRIVATE KEY") || !strings.Contains(sec.Output, "No such file or directory") {
		t.Errorf("the server read the secret: %+v", sec)
	}
	if out := got["outside"]; out.Error == "" || !strings.Contains(out.Error, "no such file or directory") || strings.Contains(out.Output, "server") {
		t.Errorf("a server outside the agent's grants ran: %+v", out)
	}
	got, _ = run("granted")
	if out := got["outside"]; out.Error != "" || strings.TrimSpace(out.Output) != "server hello" {
		t.Errorf("with its directory in sandbox.read, the server = %+v; want it run with its env", out)
	}
}
