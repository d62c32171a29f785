package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/registry"
)

// mcpSecrets are the values of the MCP servers' env and headers in
// TestEndToEndMCPServers: none may show anywhere.
var mcpSecrets = []string{"prov-secret-AAAA1111", "sess-secret-BBBB2222", "Bearer sess-secret-CCCC3333"}

// rawGet returns the body of an authenticated GET of the daemon's API.
func (d *daemon) rawGet(path string) string {
	d.t.Helper()
	req, err := http.NewRequest(http.MethodGet, d.client.BaseURL+path, nil)
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.client.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		d.t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	return string(b)
}

// noMCPSecret fails the test if text shows one of mcpSecrets.
func noMCPSecret(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range mcpSecrets {
		if strings.Contains(text, s) || strings.Contains(text, strings.TrimPrefix(s, "Bearer ")) {
			t.Errorf("%s shows the secret %q", what, s)
		}
	}
}

// A provider's MCP servers and a session's (from the CLI's --mcp and
// --mcp-json) reach the agent in session/new and, after a restart of the
// daemon, in session/load; their secrets appear in no API answer, event,
// CLI output or line of the daemon's log (the wire printed included).
func TestEndToEndMCPServers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# r\n"})
	script, _ := json.Marshal(agenttest.Script{LoadSession: true, MCPHTTP: true,
		Turns: []agenttest.Turn{{Steps: []agenttest.Step{{MCPEcho: true}}}}})
	provs := map[string]any{"fake": map[string]any{"extends": "acp", "command": []string{bin, "demo-agent"},
		"env": map[string]string{"AGENTPOOL_DEMO_SCRIPT": string(script)},
		"mcp_servers": map[string]any{
			"shared":   map[string]any{"command": "prov-shared", "env": map[string]string{"KEY": "prov-secret-AAAA1111"}},
			"provider": map[string]any{"command": "prov-only"},
			"events":   map[string]any{"type": "sse", "url": "http://127.0.0.1:9/sse"},
		}}}
	b, _ := json.Marshal(map[string]any{"version": 1, "providers": provs})
	if err := os.WriteFile(filepath.Join(home, providersFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	mcpFile := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(mcpFile, []byte(`{
		"shared": {"command": "sess-shared", "args": ["--x"], "env": {"KEY": "sess-secret-BBBB2222"}},
		"remote": {"type": "http", "url": "https://mcp.example/r", "headers": {"Authorization": "Bearer sess-secret-CCCC3333"}}
	}`), 0o600); err != nil {
		t.Fatal(err)
	}

	// The servers as given, each agent its own copies: the shared ones
	// are mcpshare_e2e_test.go's.
	d := startDaemon(t, bin, home, "AGENTPOOL_DEBUG_WIRE=1", "AGENTPOOL_MCP_SHARE=off")
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "fake", "--no-warm",
		"--mcp", "tool=mcp-tool --flag", "--mcp-json", mcpFile)
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	noMCPSecret(t, "session new", out)
	m := regexp.MustCompile(`session (\S+) created`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "remote, shared, tool") {
		t.Fatalf("session new output lacks the id or the servers:\n%s", out)
	}
	id := m[1]
	if out, err = d.cli("prompt", id, "servers?"); err != nil {
		t.Fatalf("prompt: %v\n%s", err, out)
	}
	noMCPSecret(t, "prompt", out)
	echo := func() []agenttest.MCPReceived {
		evs, err := d.client.EventLog(context.Background(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []agenttest.MCPReceived
		for _, ev := range evs {
			noMCPSecret(t, string(ev.Type)+" event", string(ev.Data))
			var c backends.ChunkData
			if ev.Type == backends.EventMessageChunk && json.Unmarshal(ev.Data, &c) == nil {
				if r, err := agenttest.ParseMCPEcho(c.Text); err == nil {
					got = r
				}
			}
		}
		return got
	}
	got := echo()
	byName := map[string]agenttest.MCPReceived{}
	var names []string
	for _, r := range got {
		byName[r.Name] = r
		names = append(names, r.Name+"@"+r.Method)
	}
	if !slices.Equal(names, []string{"provider@session/new", "remote@session/new", "shared@session/new", "tool@session/new"}) {
		t.Errorf("the agent got %v; want provider, remote, shared (the session's) and tool, the sse one skipped", names)
	}
	if s := byName["shared"]; s.Command != "sess-shared" || s.Env["KEY"] != agenttest.MCPDigest("sess-secret-BBBB2222") {
		t.Errorf("shared = %+v; want the session's, with its secret", s)
	}
	if s := byName["remote"]; s.Headers["Authorization"] != agenttest.MCPDigest("Bearer sess-secret-CCCC3333") {
		t.Errorf("remote = %+v; want its header", s)
	}
	if s := byName["tool"]; s.Command != "mcp-tool" || !slices.Equal(s.Args, []string{"--flag"}) {
		t.Errorf("tool = %+v; want mcp-tool --flag", s)
	}

	show, err := d.cli("session", "show", id)
	if err != nil {
		t.Fatalf("session show: %v\n%s", err, show)
	}
	noMCPSecret(t, "session show", show)
	for _, want := range []string{"remote", "https://mcp.example/r", "headers: Authorization", "env: KEY", "provider, remote, shared, tool"} {
		if !strings.Contains(show, want) {
			t.Errorf("session show lacks %q:\n%s", want, show)
		}
	}
	for _, path := range []string{"/v1/sessions/" + id, "/v1/sessions", "/v1/providers", "/v1/pool", "/v1/sessions/" + id + "/turns"} {
		body := d.rawGet(path)
		noMCPSecret(t, "GET "+path, body)
		if path != "/v1/providers" {
			continue
		}
		var snap registry.Snapshot
		_ = json.Unmarshal([]byte(body), &snap)
		if p, _ := snap.Provider("fake"); p.MCPServers["shared"].Env["KEY"] != backends.Redacted {
			t.Errorf("GET /v1/providers does not show the provider's server env redacted:\n%s", body)
		}
	}

	// A restarted daemon resumes the agent and passes the servers again.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	first := d.out.String()
	d = startDaemon(t, bin, home, "AGENTPOOL_DEBUG_WIRE=1", "AGENTPOOL_MCP_SHARE=off")
	d.stopAtCleanup()
	if out, err = d.cli("prompt", id, "again?"); err != nil {
		t.Fatalf("prompt after the restart: %v\n%s", err, out)
	}
	names = nil
	for _, r := range echo() {
		names = append(names, r.Name+"@"+r.Method)
	}
	if !slices.Equal(names, []string{"provider@session/load", "remote@session/load", "shared@session/load", "tool@session/load"}) {
		t.Errorf("after the restart the agent got %v; want the same servers in session/load", names)
	}
	// The daemon's output is read once it has ended.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
	for i, log := range []string{first, d.out.String()} {
		noMCPSecret(t, "the daemon's log", log)
		if !strings.Contains(log, "WIRE") || !strings.Contains(log, `"mcpServers"`) {
			t.Errorf("daemon log %d does not show the wire with mcpServers; the test proves nothing", i)
		}
	}
}
