package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// TestBrowserUsage drives the session head's usage box: tokens, the
// context bar and the cost as a scripted agent reports them, a note that
// cost in another currency is not counted against the budget, the banner
// of a turn the budget cancelled, and the budget dialog raising it; at
// 390 px nothing is wider than the screen.
func TestBrowserUsage(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	meter := agenttest.Script{Turns: []agenttest.Turn{
		{Steps: []agenttest.Step{{Chunk: "one"}, usageStep(150000, 200000, 0.3)},
			Usage: json.RawMessage(`{"inputTokens":1200,"outputTokens":300,"cachedReadTokens":800,"totalTokens":1500}`)},
		{Steps: []agenttest.Step{{Chunk: "two"}, usageStep(170000, 200000, 0.7), {WaitCancel: true}}},
	}}
	eur, _ := json.Marshal(map[string]any{"sessionUpdate": "usage_update", "used": 10, "size": 1000,
		"cost": map[string]any{"amount": 0.2, "currency": "EUR"}})
	euro := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "euro"}, {Update: eur}}}}}
	writeScripted(t, home, bin, map[string]any{"meter": meter, "euro": euro})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# usage\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	req := createReq(repo, "meter")
	req.Budget = &backends.Budget{Cost: 0.5, Currency: "USD"}
	sess, err := d.client.CreateSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, sess.ID, "", "first", true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, sess.ID, "euro", "in euros", true); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the tokens", `document.querySelector('[data-usage-tokens="1500"]')`)
	b.waitJS("the cost in both currencies", `(() => { const e = document.querySelector('[data-usage-cost]'); return e && e.dataset.usageCost.includes('0.3 USD') && e.dataset.usageCost.includes('0.2 EUR'); })()`)
	b.waitJS("the active agent's context bar, named", `(() => { const e = document.querySelector('[data-context="10/1000"]'); return e && e.parentElement.textContent.startsWith('euro context'); })()`)
	b.waitJS("the budget", `document.querySelector('[data-budget="0.5 USD"]')`)
	b.waitJS("the first turn's tokens, context and cost at its end", `(() => { const u = [...document.querySelectorAll('.stream .usage')].map(e => e.textContent);
		return u.includes('1500 tokens (in 1200 · out 300 · cached 800)') && u.includes('context 150000 of 200000 · cost so far 0.3 USD'); })()`)
	b.waitJS("the note on the other currency", `(() => { const e = document.querySelector('[data-usage-note="currency"]'); return e && e.textContent.includes('EUR') && e.textContent.includes('not counted against the budget in USD'); })()`)
	b.shot("usage")

	b.run("send the prompt that crosses the budget", js(`const t = document.querySelector('textarea[name=prompt]'); t.value = 'second';
		const p = document.querySelector('.composer select'); if (p) { p.value = 'meter'; p.dispatchEvent(new Event('change')); }
		document.querySelector('.composer button[type=submit]').click();`))
	b.waitJS("the meter's context bar, live", `document.querySelector('[data-context="170000/200000"] .fill.warn')`)
	b.waitJS("the budget banner", `(() => { const e = document.querySelector('[data-budget-exceeded="cost"]'); return e && e.textContent.includes('Turn cancelled') && e.textContent.includes('0.7 USD used of 0.5 USD'); })()`)
	b.waitJS("the turn's stop saying why", `[...document.querySelectorAll('.stream .sys.bad')].some(e => e.textContent.includes('session budget exceeded'))`)
	b.shot("budget-exceeded")

	b.run("open the budget dialog", js(`document.querySelector('[data-budget-edit]').click();`))
	b.waitJS("the dialog", `document.querySelector('dialog[open] input[name=budget-cost]')`)
	b.run("raise the budget", js(`document.querySelector('input[name=budget-cost]').value = '5';
		document.querySelector('input[name=budget-tokens]').value = '100000';`))
	b.shot("budget-dialog")
	b.run("save", js(`[...document.querySelectorAll('dialog[open] button')].find(x => x.textContent === 'Save budget').click();`))
	b.waitJS("the new budget", `document.querySelector('[data-budget="100k tokens, 5 USD"]') && !document.querySelector('[data-budget-exceeded]')`)
	su, err := d.client.SessionUsage(ctx, sess.ID)
	if err != nil || su.Budget == nil || su.Budget.Cost != 5 || su.Budget.Currency != "USD" || su.Budget.Tokens != 100000 {
		t.Errorf("budget after the dialog = %+v, %v; want 100000 tokens and 5 USD", su.Budget, err)
	}
	b.shot("budget-raised")

	b.run("phone size", chromedp.EmulateViewport(390, 844))
	b.run("back to the session", chromedp.Reload())
	b.waitJS("the usage box", `document.querySelector('[data-budget="100k tokens, 5 USD"]')`)
	if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
		t.Errorf("usage at 390 px: wider than the screen: %q", wide)
	}
	b.shot("phone-usage")
	b.run("open the budget dialog on the phone", js(`document.querySelector('[data-budget-edit]').click();`))
	b.waitJS("the dialog", `document.querySelector('dialog[open] input[name=budget-cost]')`)
	if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
		t.Errorf("budget dialog at 390 px: wider than the screen: %q", wide)
	}
	b.shot("phone-budget-dialog")
}
