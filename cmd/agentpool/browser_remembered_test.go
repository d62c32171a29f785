package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/permission"
	"github.com/chromedp/chromedp"
)

// TestBrowserForgetRemembered: a session's Audit tab lists the answers it
// remembers (an "Always allow" given through the API) with a button that
// takes them back (on a phone too, within the screen); once clicked the list is gone, the daemon remembers
// nothing, and the agent's next request is asked again.
func TestBrowserForgetRemembered(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, providersFile), []byte(browserProviders(t, bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "forget"), map[string]string{"README.md": "# forget\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	sess, err := d.client.CreateSession(ctx, createReq(repo, "demo"))
	if err != nil {
		t.Fatal(err)
	}
	t1, err := d.client.Prompt(ctx, sess.ID, "", "add a greeting", false)
	if err != nil {
		t.Fatal(err)
	}
	p := d.waitPending(sess.ID)
	if err := d.client.Answer(ctx, sess.ID, p.ID, permission.KindAllowAlways); err != nil {
		t.Fatal(err)
	}
	d.waitTurnEnd(sess.ID, t1.ID)

	b := newBrowser(t, exe)
	errs := consoleErrors(t, b)
	browserLogin(t, b, d)
	b.run("desktop size", chromedp.EmulateViewport(1280, 800))
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the tabs", `[...document.querySelectorAll('.tabs button')].some(x => x.textContent.startsWith('Audit'))`)
	b.run("the audit", js(`[...document.querySelectorAll('.tabs button')].find(x => x.textContent.startsWith('Audit')).click()`))
	b.waitJS("the remembered answers", `document.querySelector('.remembered-box [data-forget]')`)
	b.waitJS("the audit's rows", `document.querySelectorAll('.tab-body:not([hidden]) tbody tr').length >= 2`)
	got := evalJS[string](b, `document.querySelector('.remembered-box').innerText`)
	if !strings.Contains(got, "demo · edit: Always allow") {
		t.Errorf("the remembered answers read:\n%s\nwant demo's Always allow of edits", got)
	}
	b.shot("remembered")
	// On a phone the box fits the screen.
	b.run("phone size", chromedp.EmulateViewport(390, 844))
	b.run("settle", chromedp.Sleep(200e6))
	if w := evalJS[[]float64](b, `[document.documentElement.scrollWidth, document.querySelector('.remembered-box').getBoundingClientRect().right, window.innerWidth]`); w[0] > w[2] || w[1] > w[2] {
		t.Errorf("on a 390 px screen the page is %v px wide and the remembered answers end at %v px", w[0], w[1])
	}
	b.shot("remembered-phone")
	b.run("desktop size again", chromedp.EmulateViewport(1280, 800))
	b.run("forget them", chromedp.Click(chromedp.CSS(`.remembered-box [data-forget]`), chromedp.NodeVisible))
	b.waitJS("the list gone", `!document.querySelector('.remembered-box').children.length`)
	b.shot("forgotten")
	if list, err := d.client.Remembered(ctx, sess.ID); err != nil || len(list) != 0 {
		t.Fatalf("remembered after Forget = %+v, %v; want none", list, err)
	}
	// The agent's next write is asked again.
	t2, err := d.client.Prompt(ctx, sess.ID, "", "and a farewell", false)
	if err != nil {
		t.Fatal(err)
	}
	p = d.waitPending(sess.ID)
	if p.Request.Turn != t2.ID {
		t.Fatalf("request %s of turn %d; want turn %d asked", p.ID, p.Request.Turn, t2.ID)
	}
	if err := d.client.Answer(ctx, sess.ID, p.ID, permission.KindRejectOnce); err != nil {
		t.Fatal(err)
	}
	if got := errs(); len(got) > 0 {
		t.Errorf("the page logged errors: %q", got)
	}
}
