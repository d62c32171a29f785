package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// confinementProviders writes the providers of TestBrowserConfinement:
// "fetch", whose agent asks curl for a host its network list does not
// name, and "strict", whose sandbox is required.
func confinementProviders(t *testing.T, home, bin string) {
	t.Helper()
	script, err := json.Marshal(agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{Sys: &agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"curl", "-sS", "-m", "5", "-o", "/dev/null", "http://blocked.example:8080/"}}},
		{Chunk: "tried blocked.example"},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	demo := []string{bin, "demo-agent"}
	cfg, _ := json.Marshal(map[string]any{"version": 1, "providers": map[string]any{
		"fetch": map[string]any{"extends": "acp", "label": "Fetch", "command": demo, "env": map[string]string{"AGENTPOOL_DEMO_SCRIPT": string(script)},
			"sandbox": map[string]any{"network": []any{443, "api.example.com:443"}}},
		"strict": map[string]any{"extends": "acp", "label": "Strict", "command": demo, "sandbox": map[string]any{"required": true}},
	}})
	if err := os.WriteFile(filepath.Join(home, providersFile), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserConfinement: where agents get namespaces, a connection the
// egress proxy refuses shows in the session's stream and audit, in
// `events`, and on the provider's card and in providers list, with the
// network entry that would allow it. The same daemon started again as on
// a machine that forbids namespaces shows, above the providers, that
// agents run under Landlock only (what they can reach, why, how to fix
// it); each card says so, a host list is not enforced, and a required
// sandbox is refused. The pool says an agent runs in namespaces.
// Screenshots at 1280 × 800 and 390 × 844.
func TestBrowserConfinement(t *testing.T) {
	exe := findBrowser(t)
	if _, err := exec.LookPath("curl"); err != nil {
		agenttest.RequireFeature(t, false, "curl (the agent's client through the egress proxy)")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	confinementProviders(t, home, bin)
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# app\n"})
	d := startDaemon(t, bin, home)
	stop := func(d *daemon) {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	}
	t.Cleanup(func() { stop(d) })
	ctx := context.Background()
	h, err := d.client.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := confinementOf(h.Confinement)
	agenttest.RequireFeature(t, st != nil && st.Namespaces, "namespaces for agents (unprivileged user namespaces and Landlock)")

	sess, err := d.client.CreateSession(ctx, createReq(repo, "fetch"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, sess.ID, "", "fetch it", true); err != nil {
		t.Fatal(err)
	}
	const line = `network refused: blocked.example:8080 (not on the allow-list); allow it with "sandbox.network": [..., "blocked.example:8080"]`
	if out, err := d.cli("events", sess.ID); err != nil || !strings.Contains(out, line) {
		t.Errorf("agentpool events = %v\n%s\nwant the line %s", err, out, line)
	}
	out, err := d.cli("providers", "list")
	if err != nil || !strings.Contains(out, "namespaces (the network through the egress proxy only)") ||
		!strings.Contains(out, "fetch: blocked.example:8080 (not on the allow-list)") ||
		!strings.Contains(out, `allow it with "sandbox.network": [443, "api.example.com:443", "blocked.example:8080"]`) {
		t.Errorf("providers list = %v\n%s\nwant namespaces and the refused connection of fetch with the list to write", err, out)
	}
	t.Logf("providers list with namespaces:\n%s", out)

	b := newBrowser(t, exe)
	b.run("desktop size", chromedp.EmulateViewport(1280, 800))
	browserLogin(t, b, d)
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the refusal in the stream", `[...document.querySelectorAll('.stream .sys.bad')].some(e => e.textContent.includes('network refused: blocked.example:8080 (not on the allow-list)') &&
		e.textContent.includes('allow it with "sandbox.network": [..., "blocked.example:8080"]'))`)
	b.run("show it", js(`[...document.querySelectorAll('.stream .sys.bad')].find(e => e.textContent.includes('network refused')).scrollIntoView({block: 'center'})`))
	t.Logf("screenshot: %s", b.shot("session-network-refused"))

	b.run("open the providers", chromedp.Navigate(d.client.BaseURL+"/#/providers"))
	b.waitJS("fetch's refused connection", `(() => { const e = document.querySelector('[data-provider=fetch] [data-network-refused]');
		return e && e.textContent.includes('blocked.example:8080: not on the allow-list') && e.textContent.includes('"sandbox.network": [443, "api.example.com:443", "blocked.example:8080"]'); })()`)
	if got := evalJS[string](b, `document.querySelector('[data-provider=fetch] [data-sandbox]').textContent`); !strings.Contains(got, "confined · network 443, api.example.com:443") {
		t.Errorf("fetch's sandbox line = %q; want it confined with its list", got)
	}
	if evalJS[bool](b, `!!document.querySelector('[data-confinement=landlock-only]')`) {
		t.Error("the Landlock-only notice shows on a machine with namespaces")
	}
	b.run("show fetch", js(`document.querySelector('[data-provider=fetch]').scrollIntoView({block: 'center'})`))
	t.Logf("screenshot: %s", b.shot("provider-network-refused"))
	b.run("open the pool", chromedp.Navigate(d.client.BaseURL+"/#/pool"))
	b.waitJS("fetch's agent in namespaces", `(() => { const e = document.querySelector('tr[data-agent=fetch]');
		return e && e.textContent.includes('landlock v') && e.textContent.includes('namespaces · net list'); })()`)
	t.Logf("screenshot: %s", b.shot("pool-namespaces"))
	b.run("open the providers", chromedp.Navigate(d.client.BaseURL+"/#/providers"))
	b.waitJS("the cards", `!!document.querySelector('[data-provider=fetch] [data-network-refused]')`)
	b.run("phone size", chromedp.EmulateViewport(390, 844))
	b.run("show fetch", js(`document.querySelector('[data-provider=fetch]').scrollIntoView({block: 'center'})`))
	if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
		t.Errorf("providers on a phone: wider than the 390 px screen: %q", wide)
	}
	t.Logf("screenshot: %s", b.shot("phone-provider-network-refused"))
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the refusal in the stream", `[...document.querySelectorAll('.stream .sys.bad')].some(e => e.textContent.includes('network refused: blocked.example:8080'))`)
	b.run("show it", js(`[...document.querySelectorAll('.stream .sys.bad')].find(e => e.textContent.includes('network refused')).scrollIntoView({block: 'center'})`))
	if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
		t.Errorf("the session on a phone: wider than the 390 px screen: %q", wide)
	}
	t.Logf("screenshot: %s", b.shot("phone-session-network-refused"))
	b.run("the audit", js(`[...document.querySelectorAll('button')].find(e => e.textContent.startsWith('Audit')).click()`))
	b.waitJS("the refusal in the audit", `[...document.querySelectorAll('tr')].some(r => r.textContent.includes('refused') && r.textContent.includes('blocked.example:8080'))`)
	t.Logf("screenshot: %s", b.shot("phone-session-audit"))

	// The same home, as on a machine that forbids namespaces.
	stop(d)
	d = startDaemon(t, bin, home, "AGENTPOOL_TEST_NO_NAMESPACES=1")
	b.run("desktop size", chromedp.EmulateViewport(1280, 800))
	browserLogin(t, b, d) // another port: another origin
	b.run("open the providers", chromedp.Navigate(d.client.BaseURL+"/#/providers"))
	what, fix, _ := strings.Cut(sandbox.LandlockOnlyWarning, "; ")
	// The page starts the fix with a capital: compare what follows.
	b.waitJS("the Landlock-only notice", `(() => { const e = document.querySelector('[data-confinement=landlock-only]');
		return e && e.textContent.includes(`+jsString(what)+`) && e.textContent.includes('namespaces are off for this daemon') &&
			e.textContent.includes(`+jsString(fix[1:])+`); })()`)
	if !strings.HasPrefix(what, "Landlock only: agents can reach unix sockets and local services") {
		t.Errorf("the notice says %q; want what agents can reach", what)
	}
	for id, want := range map[string]string{
		"fetch":  "Landlock only · network 443, api.example.com:443 (not enforced: hosts need namespaces)",
		"strict": "refused: its sandbox is required and this machine gives agents no namespaces",
	} {
		if got := evalJS[string](b, `document.querySelector('[data-provider=`+id+`] [data-sandbox]').textContent`); !strings.Contains(got, want) {
			t.Errorf("%s's sandbox line = %q; want %q", id, got, want)
		}
	}
	t.Logf("screenshot: %s", b.shot("providers-landlock-only"))
	b.run("show fetch and strict", js(`document.querySelector('[data-provider=fetch]').scrollIntoView({block: 'start'})`))
	t.Logf("screenshot: %s", b.shot("providers-landlock-only-fetch"))
	b.run("show strict", js(`document.querySelector('[data-provider=strict]').scrollIntoView({block: 'center'})`))
	t.Logf("screenshot: %s", b.shot("providers-landlock-only-strict"))
	b.run("phone size", chromedp.EmulateViewport(390, 844))
	b.run("top", js(`window.scrollTo(0, 0); document.querySelector('#main').scrollTo(0, 0)`))
	if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
		t.Errorf("providers on a phone: wider than the 390 px screen: %q", wide)
	}
	t.Logf("screenshot: %s", b.shot("phone-providers-landlock-only"))

	out, err = d.cli("providers", "list")
	if err != nil || !strings.Contains(out, "Landlock only (no namespaces)") || !strings.Contains(out, "      why: namespaces are off for this daemon") ||
		!strings.Contains(out, "REFUSED (no namespaces)") || !strings.Contains(out, "(NOT enforced: hosts need namespaces)") {
		t.Errorf("providers list without namespaces = %v\n%s\nwant Landlock only, why, strict refused and fetch's hosts not enforced", err, out)
	}
	t.Logf("providers list without namespaces:\n%s", out)
}
