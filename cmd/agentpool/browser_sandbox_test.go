package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserSandboxNotes: a provider's card in the page shows the
// sandbox grants the daemon refuses, with why.
func TestBrowserSandboxNotes(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{"version": 1, "providers": map[string]any{
		"peek": map[string]any{"extends": "acp", "command": []string{bin, "demo-agent"}, "sandbox": map[string]any{"read": []string{"~/.ssh"}}},
	}})
	if err := os.WriteFile(filepath.Join(home, providersFile), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, bin, home)
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	})
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("open providers", chromedp.Navigate(d.client.BaseURL+"/#/providers"))
	b.waitJS("peek's sandbox note", `document.querySelector('[data-provider=peek] [data-sandbox-notes]') &&
		document.querySelector('[data-provider=peek] [data-sandbox-notes]').textContent.includes('is a secret: ~/.ssh')`)
	b.run("show peek", js(`document.querySelector('[data-provider=peek]').scrollIntoView()`))
	t.Logf("screenshot: %s", b.shot("provider-sandbox-notes"))
}
