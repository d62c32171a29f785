package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// toastClear is a JavaScript expression: the buttons and links of the
// header and of the page's head that a shown toast covers, as their text;
// none when no toast covers any.
const toastClear = `(() => { const ts = [...document.querySelectorAll('#toasts .toast')].map(t => t.getBoundingClientRect());
	const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
	return [...document.querySelectorAll('.top a, .top button, .page-head button, .page-head a, .session-head button, .composer button')]
		.filter(e => e.offsetParent && ts.some(t => hit(t, e.getBoundingClientRect()))).map(e => e.textContent.trim()); })()`

// TestBrowserRoughEdges drives the page at 390 × 844 and at the desktop's
// width through a new user's rough edges: the empty pool says agents
// start when a session is created; a built-in agent that is not installed
// shows its install command and can be refreshed; a toast covers no
// header or head button; the pool, the approval dialog and the audit
// name the session and the request by their titles, memory in MiB; a
// long title fits the screen; a custom provider can be removed; Merge
// shows what it did or why not; a session closed with its work discarded
// shows its branch deleted and its worktree removed. Nothing is wider
// than the screen.
func TestBrowserRoughEdges(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, providersFile), []byte(browserProviders(t, bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# rough\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("phone size", chromedp.EmulateViewport(390, 844))
	fits := func(page string) {
		t.Helper()
		if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
			t.Errorf("%s: wider than the 390 px screen: %q", page, wide)
		}
		b.shot("rough-" + strings.ReplaceAll(page, " ", "-"))
	}

	b.run("the empty pool", chromedp.Navigate(d.client.BaseURL+"/#/pool"))
	b.waitJS("the pool's empty text", `document.querySelector('.page h1') && document.querySelector('.page h1').textContent === 'Pool' && document.querySelector('.page .empty') && !document.querySelector('.page .empty').textContent.includes('Loading')`)
	if text := evalJS[string](b, `document.querySelector('.page .empty').textContent`); !strings.Contains(text, "when the session is created") || strings.Contains(text, "first prompt") {
		t.Errorf("empty pool says %q; want agents to start when a session is created", text)
	}
	fits("empty pool")

	// claude is built in and enabled, and its adapter is not on this
	// machine's PATH (the daemon's PATH is the test's).
	b.run("the providers", chromedp.Navigate(d.client.BaseURL+"/#/providers"))
	b.waitJS("the claude card", `document.querySelector('[data-provider=claude] [data-status]')`)
	if st := evalJS[string](b, `document.querySelector('[data-provider=claude] [data-status]').dataset.status`); st != "not_installed" {
		agenttest.RequireFeature(t, false, "claude not installed (it is "+st+" here)")
	}
	if got := evalJS[string](b, `(document.querySelector('[data-provider=claude] [data-install] code') || {}).textContent || ''`); got != "npm install -g @agentclientprotocol/claude-agent-acp" {
		t.Errorf("not-installed claude card shows install command %q", got)
	}
	if !evalJS[bool](b, `!!document.querySelector('[data-provider=claude] [data-install] button')`) {
		t.Error("no Copy button by the install command")
	}
	if evalJS[bool](b, `[...document.querySelectorAll('[data-provider=claude] button')].find(x => x.textContent === 'Refresh').disabled`) {
		t.Error("Refresh of a not-installed provider is disabled")
	}
	fits("providers not installed")

	toastCovers := func(where string) {
		t.Helper()
		b.run("reload providers.json", js(`[...document.querySelectorAll('.page-head button')].find(x => x.textContent.startsWith('Reload')).click()`))
		b.waitJS("the toast", `document.querySelector('#toasts .toast')`)
		if covered := evalJS[[]string](b, toastClear); len(covered) > 0 {
			t.Errorf("%s: the toast covers %q", where, covered)
		}
		b.shot("rough-toast-" + where)
		b.run("the toasts gone", js(`document.getElementById('toasts').replaceChildren()`))
	}
	toastCovers("phone")
	b.run("desktop size", chromedp.EmulateViewport(1280, 860))
	toastCovers("desktop")
	b.run("phone size again", chromedp.EmulateViewport(390, 844))

	// A custom provider has a Remove button, confirmed first; a built-in
	// has none (it can only be disabled).
	if evalJS[bool](b, `!!document.querySelector('[data-provider=claude] button[data-remove]')`) {
		t.Error("the built-in claude has a Remove button")
	}
	b.run("click Remove of flood", js(`document.querySelector('[data-provider=flood] button[data-remove]').click()`))
	b.waitJS("the remove dialog", `document.querySelector('dialog#confirm').open`)
	fits("remove provider dialog")
	b.run("confirm", js(`[...document.querySelectorAll('dialog#confirm .dlg-foot button')].find(x => x.textContent === 'Remove').click()`))
	b.waitJS("the flood card gone", `!document.querySelector('[data-provider=flood]') && document.querySelector('[data-provider=xss]')`)
	if data, err := os.ReadFile(filepath.Join(home, providersFile)); err != nil || strings.Contains(string(data), `"flood"`) || !strings.Contains(string(data), `"xss"`) {
		t.Errorf("providers.json after removing flood (%v):\n%s", err, data)
	}

	const title = "Teach the_supervisor_to_restart_crashed_agents_without_losing_their_conversation"
	req := createReq(repo, "demo")
	req.Title = title
	sess, err := d.client.CreateSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b.run("the sessions list", chromedp.Navigate(d.client.BaseURL+"/#/"))
	b.waitJS("the session", `document.querySelector('tr[data-session]')`)
	fits("sessions long title")

	b.run("the pool", chromedp.Navigate(d.client.BaseURL+"/#/pool"))
	b.waitJS("the demo agent", `document.querySelector('tr[data-agent=demo]')`)
	b.waitJS("the session's title in the pool", `document.querySelector('tr[data-agent=demo] [data-session-title]')`)
	if got := evalJS[string](b, `document.querySelector('tr[data-agent=demo] [data-session-title]').textContent`); got != title {
		t.Errorf("pool names the session %q; want its title", got)
	}
	if tip := evalJS[string](b, `document.querySelector('tr[data-agent=demo] [data-session-title]').title`); !strings.Contains(tip, sess.ID) {
		t.Errorf("pool's session tooltip %q lacks the id %s", tip, sess.ID)
	}
	b.waitJS("the demo agent's memory", `document.querySelector('tr[data-agent=demo] td[data-label=memory]').textContent !== '—'`)
	if mem := evalJS[string](b, `document.querySelector('tr[data-agent=demo] td[data-label=memory]').textContent`); !strings.HasSuffix(mem, "iB") {
		t.Errorf("memory shows %q; want binary units (KiB, MiB) as the CLI", mem)
	}
	fits("pool long title")

	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the composer", `document.querySelector('.composer textarea')`)
	b.run("send a prompt",
		chromedp.SetValue(chromedp.CSS(`.composer textarea`), "add a greeting"),
		chromedp.Click(chromedp.CSS(`.composer button[type=submit]`)))
	b.waitJS("the approval dialog", `document.querySelector('dialog#approval').open && document.querySelector('dialog#approval button[data-kind=allow_once]')`)
	if got := evalJS[string](b, `document.querySelector('dialog#approval [data-approval-session]').textContent`); got != "Session "+title {
		t.Errorf("approval names the session %q; want its title", got)
	}
	fits("approval long title")
	b.run("allow", js(`document.querySelector('dialog#approval button[data-kind=allow_once]').click()`))
	b.waitJS("the turn's end", `document.querySelector('.turn-foot .badge')`)
	b.run("the audit", js(`[...document.querySelectorAll('.tabs button')].find(x => x.textContent.startsWith('Audit')).click()`))
	b.waitJS("the audit's rows", `document.querySelectorAll('.tab-body:not([hidden]) tbody tr').length >= 2`)
	if subjects := evalJS[[]string](b, `[...document.querySelectorAll('.tab-body:not([hidden]) tbody tr')].map(r => r.children[5].textContent)`); strings.Contains(strings.Join(subjects, "\n"), "request ") {
		t.Errorf("audit names a request by its id: %q", subjects)
	}
	fits("audit")

	// Merge, confirmed in a dialog: into a branch that does not exist, the
	// error shows; into the base, what it did.
	merge := func(into, want string) {
		t.Helper()
		b.run("click Merge", js(`document.querySelector('[data-merge-open]').click()`))
		b.waitJS("the merge dialog", `document.querySelector('dialog#confirm').open && document.querySelector('dialog#confirm input[name=into]')`)
		b.run("choose the target", js(`document.querySelector('dialog#confirm input[name=into]').value = `+jsString(into)))
		fits("merge dialog")
		b.run("confirm", js(`[...document.querySelectorAll('dialog#confirm .dlg-foot button')].find(x => x.textContent === 'Merge').click()`))
		// The outcome of this merge, not the one still shown from the last.
		b.waitJS("the merge's outcome", `document.querySelector('.merge-box [data-merge]') && document.querySelector('.merge-box [data-merge]').dataset.merge === `+jsString(want))
	}
	b.run("the conversation", js(`[...document.querySelectorAll('.tabs button')].find(x => x.textContent === 'Conversation').click()`))
	merge("no-such-branch", "failed")
	if got := evalJS[string](b, `document.querySelector('.merge-box [data-merge]').dataset.merge + ': ' + document.querySelector('.merge-box [data-merge]').textContent`); !strings.HasPrefix(got, "failed: DismissMerge failed.") || !strings.Contains(got, "no-such-branch") {
		t.Errorf("merge into a missing branch shows %q", got)
	}
	fits("merge refused")
	merge("", "fast-forward")
	if got := evalJS[string](b, `document.querySelector('.merge-box [data-merge]').dataset.merge + ': ' + document.querySelector('.merge-box [data-merge]').textContent`); !strings.HasPrefix(got, "fast-forward: DismissMerged agentpool/"+sess.ID+" into main (fast-forward)") || !strings.Contains(got, "Files updated in "+repo) {
		t.Errorf("merge shows %q", got)
	}
	if _, err := os.Stat(filepath.Join(repo, "AGENTPOOL_DEMO.md")); err != nil {
		t.Errorf("after the merge, the main checkout: %v", err)
	}
	fits("merged")
	b.run("desktop size", chromedp.EmulateViewport(1280, 860))
	b.shot("rough-merged-desktop")
	b.run("phone size again", chromedp.EmulateViewport(390, 844))

	if _, err := d.client.CloseSession(ctx, sess.ID, true); err != nil {
		t.Fatal(err)
	}
	b.run("the sessions list", chromedp.Navigate(d.client.BaseURL+"/#/"))
	b.run("open the closed session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the branch deleted", `document.querySelector('.session .meta [data-branch=deleted]')`)
	if !evalJS[bool](b, `!!document.querySelector('.session .meta [data-worktree=removed]')`) {
		t.Errorf("closed session's worktree shown as %q", evalJS[string](b, `document.querySelector('.session .meta').textContent`))
	}
	fits("closed discarded")
	b.run("desktop size", chromedp.EmulateViewport(1280, 860))
	b.shot("rough-closed-desktop")
}
