package main

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// TestMCPServerNotForPooledAgents: an agent of the pool that runs
// `agentpool mcp` itself, pointed at the daemon's data directory or at its
// address, gets tool errors and nothing of the pool: it has no credential,
// and no way to the daemon either.
func TestMCPServerNotForPooledAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	agenttest.RequireFeature(t, sandbox.LandlockABI() >= 4, "Landlock ABI 4")
	bin := agentpoolBinary(t)
	home := t.TempDir()
	d0 := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"insider","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_sessions","arguments":{}}}`,
	}
	mcpRun := func(env string) string {
		return fmt.Sprintf("{ printf '%%s\\n' '%s'; sleep 2; } | env %s %s mcp 2>&1 | grep '\"id\":2' || echo no answer\n", strings.Join(d0, "' '"), env, bin)
	}
	// The daemon's address is no secret: an agent can find the port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	probe := "echo HOME-PROBE\n" + mcpRun("AGENTPOOL_HOME="+home) +
		"echo ADDR-PROBE\n" + mcpRun("AGENTPOOL_ADDR="+addr+" AGENTPOOL_TOKEN=a-guess")
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "proj"), map[string]string{"README.md": "# proj\n", "probe.sh": probe})
	writeScripted(t, home, bin, map[string]any{"insider": agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{Terminal: &agenttest.Terminal{Command: "sh probe.sh"}},
	}}}}})
	d := startDaemon(t, bin, home, "AGENTPOOL_LISTEN="+addr)
	d.stopAtCleanup()
	c := startMCP(t, bin, home, repo)

	// The first prompt with the session, and a first wait.
	text, sc := c.call("create_session", map[string]any{"agent": "insider", "prompt": "try the pool", "wait_seconds": 50}, nil, false)
	id, _ := sc["id"].(string)
	first, _ := sc["first_turn"].(map[string]any)
	if id == "" || first["turn"] != float64(1) || first["state"] == "running" || !strings.Contains(text, "Started turn 1 of session "+id) {
		t.Fatalf("create_session with a prompt = %q, %v; want the session and its first turn waited for", text, sc)
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		text, sc = c.call("wait_turn", map[string]any{"session": id, "turn": 1}, nil, false)
		if sc["state"] == "waiting_for_permission" {
			for _, p := range sc["permissions"].([]any) {
				c.call("answer_permission", map[string]any{"session": id, "request": p.(map[string]any)["id"], "choice": "allow_once"}, nil, false)
			}
			continue
		}
		if sc["state"] != "running" {
			break
		}
	}
	if sc["state"] != "ended" || !strings.Contains(text, "ADDR-PROBE") {
		t.Fatalf("turn of the insider = %q, %v; want it ended with the probe's output", text, sc)
	}
	t.Logf("insider turn:\n%s", text)
	// The daemon's data directory shows no daemon.json in the agent's
	// view, and its port is nobody's in the agent's network namespace.
	if strings.Count(text, `"isError":true`) != 2 || !strings.Contains(text, "no daemon found in "+home) ||
		!strings.Contains(text, "dial tcp "+addr+": connect: connection refused") || strings.Contains(text, id+":") || strings.Contains(text, `"sessions"`) {
		t.Errorf("agentpool mcp run by a pooled agent answered:\n%s\nwant a tool error and no session", text)
	}
}
