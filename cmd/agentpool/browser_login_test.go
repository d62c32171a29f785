package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// TestBrowserAgentLogin: a provider that needs a login shows "Needs
// login" and its ways to log in on its card; Log in has the agent log in,
// and the card turns Available. An agent's link that is not http(s) is not
// made a link.
func TestBrowserAgentLogin(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	state := filepath.Join(t.TempDir(), "agent-state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	raw, _ := json.Marshal(agenttest.Script{LoginFile: filepath.Join(state, "credentials"), AuthMethods: json.RawMessage(`[
		{"id": "oauth", "name": "Log in with a browser", "description": "Opens the vendor's page"},
		{"id": "key", "name": "API key", "type": "env_var", "vars": [{"name": "FAKE_API_KEY"}], "link": "javascript:alert(1)"},
		{"id": "tui", "name": "In a terminal", "type": "terminal", "args": ["--login"]}]`)})
	env := map[string]string{agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(raw), "GORACE": "atexit_sleep_ms=0"}
	cfg, _ := json.Marshal(map[string]any{"version": 1, "providers": map[string]any{
		"fake": map[string]any{"extends": "acp", "label": "Fake agent", "command": []string{self}, "env": env, "sandbox": map[string]any{"write": []string{state}}},
	}})
	if err := os.WriteFile(filepath.Join(home, providersFile), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, bin, home)
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	})
	waitProviderStatus(t, d, "fake", "needs_auth")
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("open providers", chromedp.Navigate(d.client.BaseURL+"/#/providers"))
	card := `document.querySelector('[data-provider=fake]')`
	b.waitJS("the login controls", card+` && `+card+`.querySelector('[data-login] button') && `+card+`.textContent.includes('Needs login')`)
	if n := evalJS[int](b, card+`.querySelectorAll('[data-login] a').length`); n != 0 {
		t.Errorf("the agent's javascript: link became %d link(s)", n)
	}
	if txt := evalJS[string](b, card+`.querySelector('[data-login]').textContent`); !strings.Contains(txt, "agentpool login fake --method tui") || !strings.Contains(txt, "FAKE_API_KEY") {
		t.Errorf("login controls say %q; want the terminal command and the variable", txt)
	}
	b.run("show the card", js(card+`.scrollIntoView()`))
	t.Logf("screenshot: %s", b.shot("provider-needs-login"))
	b.run("log in", js(card+`.querySelector('[data-login] button').click()`))
	b.waitJS("the card to turn available", `(() => { const c = `+card+`; return c && c.querySelector('[data-status]').dataset.status === 'ready'; })()`)
	t.Logf("screenshot: %s", b.shot("provider-logged-in"))
}
