package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// browserCatalogDoc is the catalog the browser test gives the daemon: a
// built-in agent under the registry's id, an npx agent with environment,
// and a binary agent with no archive for this platform.
const browserCatalogDoc = `{"version": "1.0.0", "agents": [
  {"id": "claude-code-acp", "name": "Claude Code", "version": "0.16.0", "description": "ACP wrapper for Anthropic's Claude",
   "distribution": {"npx": {"package": "@zed-industries/claude-code-acp@0.16.0"}}},
  {"id": "tiny", "name": "Tiny Agent", "version": "1.2.0", "description": "a small agent",
   "distribution": {"npx": {"package": "@tiny/agent", "args": ["--acp"], "env": {"TINY_MODE": "acp"}}}},
  {"id": "elsewhere", "name": "Elsewhere", "version": "3.0.0", "description": "only for another system",
   "distribution": {"binary": {"windows-x86_64": {"archive": "https://example.test/e.zip", "cmd": "e.exe"}}}}
], "extensions": []}`

// TestBrowserCatalog: the Add provider dialog reads the daemon's catalog
// (GET /v1/catalog), here one given with PUT /v1/catalog: it shows each
// agent's version and install step with a Copy button, links a built-in
// to its card, says when an agent has nothing for this platform, and adds
// an agent through the form with the catalog's command and environment.
func TestBrowserCatalog(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	if _, err := d.client.PutCatalog(context.Background(), []byte(browserCatalogDoc)); err != nil {
		t.Fatalf("PutCatalog() error = %v", err)
	}
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("open Providers", chromedp.Navigate(d.client.BaseURL+"/#/providers"))
	b.waitJS("the providers page", `document.querySelector('[data-provider=claude]')`)
	b.run("open Add provider", js(`document.querySelector('.page-head button.primary').click()`))
	b.waitJS("the catalog from the daemon", `document.querySelector('dialog.addprov [data-catalog=tiny]')`)

	if got := evalJS[string](b, `[...document.querySelectorAll('dialog.addprov [data-catalog]')].map(x => x.dataset.catalog).join(' ')`); got != "claude tiny elsewhere" {
		t.Errorf("catalog entries = %q; want the daemon's: claude tiny elsewhere", got)
	}
	claude := evalJS[string](b, `document.querySelector('[data-catalog=claude]').innerText`)
	for _, want := range []string{"built-in", "See its card", "v0.16.0", "npm install -g @agentclientprotocol/claude-agent-acp", "Copy"} {
		if !strings.Contains(claude, want) {
			t.Errorf("catalog entry of Claude Code = %q; want %q in it", claude, want)
		}
	}
	tiny := evalJS[string](b, `document.querySelector('[data-catalog=tiny]').innerText`)
	for _, want := range []string{"v1.2.0", "npx -y @tiny/agent@1.2.0 --acp", "npm install -g @tiny/agent@1.2.0", "TINY_MODE=acp", "Use"} {
		if !strings.Contains(tiny, want) {
			t.Errorf("catalog entry of Tiny Agent = %q; want %q in it", tiny, want)
		}
	}
	if txt := evalJS[string](b, `document.querySelector('[data-catalog=elsewhere]').innerText`); !strings.Contains(txt, "has no distribution for linux-") ||
		evalJS[bool](b, `!!document.querySelector('[data-catalog=elsewhere] button')`) {
		t.Errorf("catalog entry of Elsewhere = %q; want it to say it has nothing for this platform, without a Use button", txt)
	}
	if txt := evalJS[string](b, `document.querySelector('dialog.addprov .cat-source').textContent`); !strings.Contains(txt, filepath.Join(home, catalogFile)) {
		t.Errorf("the catalog's source = %q; want the stored file", txt)
	}
	b.run("copy Tiny's install step", js(`document.querySelector('[data-catalog=tiny] .cat-install button').click()`))
	b.waitJS("a copy toast", `[...document.querySelectorAll('.toast')].some(x => /copy|copied/i.test(x.textContent))`)
	b.shot("catalog-dialog")

	b.run("use Tiny", js(`document.querySelector('[data-catalog=tiny] .cat-action button').click()`))
	if got := evalJS[string](b, `[...document.querySelectorAll('dialog.addprov [name]')].map(x => x.name + '=' + x.value).join(' ')`); !strings.Contains(got, "id=tiny label=Tiny Agent extends=acp command=npx -y @tiny/agent@1.2.0 --acp env=TINY_MODE=acp") {
		t.Errorf("the form after Use on Tiny = %q; want the catalog's command and env", got)
	}
	b.run("add Tiny", js(`document.querySelector('dialog.addprov button[type=submit]').click()`))
	b.waitJS("Tiny's card", `document.querySelector('[data-provider=tiny]') && !document.querySelector('dialog.addprov')`)
	raw, err := os.ReadFile(filepath.Join(home, providersFile))
	var onDisk struct {
		Providers map[string]map[string]any `json:"providers"`
	}
	if err != nil || json.Unmarshal(raw, &onDisk) != nil {
		t.Fatalf("read providers.json: %v\n%s", err, raw)
	}
	if p := onDisk.Providers["tiny"]; p["extends"] != "acp" || p["label"] != "Tiny Agent" || len(p["command"].([]any)) != 4 {
		t.Errorf("providers.json tiny = %v; want the catalog's entry", p)
	}
}
