package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// TestBrowserMCPServers: a session's page names its own MCP servers and
// those its agent got, and says which the agent could not take; no
// secret value reaches the page.
func TestBrowserMCPServers(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	script, _ := json.Marshal(agenttest.Script{})
	cfg, _ := json.Marshal(map[string]any{"version": 1, "providers": map[string]any{
		"fake": map[string]any{"extends": "acp", "command": []string{bin, "demo-agent"},
			"env":         map[string]string{"AGENTPOOL_DEMO_SCRIPT": string(script)},
			"mcp_servers": map[string]any{"files": map[string]any{"command": "mcp-files", "env": map[string]string{"KEY": "prov-secret-AAAA1111"}}}},
	}})
	if err := os.WriteFile(filepath.Join(home, providersFile), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# r\n"})
	d := startDaemon(t, bin, home)
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	})
	req := createReq(repo, "fake")
	req.MCPServers = backends.MCPServers{"remote": {Type: backends.MCPHTTP, URL: "https://mcp.example/r",
		Headers: map[string]string{"Authorization": "Bearer sess-secret-CCCC3333"}}}
	s, err := d.client.CreateSession(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+s.ID))
	b.waitJS("the session's own servers", `(document.querySelector('[data-mcp=""]') || {}).textContent === 'session remote (http)'`)
	b.waitJS("the servers the agent got", `(document.querySelector('[data-mcp=fake]') || {}).textContent === 'fake got files'`)
	b.waitJS("the note of the server it could not take", `[...document.querySelectorAll('.sys')].some(e =>
		e.textContent.includes('fake got MCP servers: files; not remote (http)'))`)
	html := evalJS[string](b, `document.documentElement.outerHTML`)
	noMCPSecret(t, "the session's page", html)
	t.Logf("screenshot: %s", b.shot("session-mcp-servers"))
}
