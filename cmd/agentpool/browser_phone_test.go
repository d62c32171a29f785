package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// phoneWide is a JavaScript expression: what on the page is wider than
// the screen, as "selector: width" items; none when the page fits. It
// looks at the document, at the main box that scrolls the page's content,
// and at the session's scrolling parts and an open dialog.
const phoneWide = `[document.documentElement, ...document.querySelectorAll('#main, .session-head, .stream, .composer, .page, dialog[open], dialog[open] .dlg-body')]
	.filter(e => e.scrollWidth > Math.min(e.clientWidth, window.innerWidth))
	.map(e => (e.id ? '#' + e.id : e.tagName.toLowerCase() + (e.className ? '.' + String(e.className).split(' ').join('.') : '')) + ': ' + e.scrollWidth)`

// phoneVisible is a JavaScript expression for the element sel: rendered,
// and its bounding box within the viewport horizontally.
func phoneVisible(sel string) string {
	return `(() => { const e = document.querySelector(` + jsString(sel) + `); if (!e || !e.offsetParent && getComputedStyle(e).position !== 'fixed') return false;
		const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= window.innerWidth; })()`
}

// rawKeyDown sends a key's down event as a real keyboard does, without
// the text that its char event carries: a keyDown with a char event after
// it types the key twice into xterm in headless Chromium.
func rawKeyDown(p *input.DispatchKeyEventParams) {
	if p.Type == input.DispatchKeyEventTypeKeyDown {
		p.Type = input.DispatchKeyEventTypeRawKeyDown
	}
}

// TestBrowserPhone drives the page at a phone's 390 × 844: the sessions
// list, a session on a repository with a long path, the approval dialog
// open, the providers and the pool with an agent are no wider than the
// screen; the "need you" badge and the Evict button show. Then the
// terminal's "Type here" takes the keyboard: keys typed next reach the
// shell.
func TestBrowserPhone(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, providersFile), []byte(browserProviders(t, bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(t.TempDir(), "a_repository_with_a_rather_long_directory_name", "and_another_long_directory_name_below_it_that_goes_on_and_on")
	repo := e2eRepoAt(t, long, map[string]string{"README.md": "# phone\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	sess, err := d.client.CreateSession(ctx, createReq(repo, "demo"))
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("phone size", chromedp.EmulateViewport(390, 844))

	fits := func(page string) {
		t.Helper()
		if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
			t.Errorf("%s: wider than the 390 px screen: %q", page, wide)
		}
		b.shot("phone-" + strings.ReplaceAll(page, " ", "-"))
	}

	b.run("the sessions list", chromedp.Navigate(d.client.BaseURL+"/#/"))
	b.waitJS("the sessions table", `document.querySelectorAll('tr[data-session]').length === 1`)
	fits("sessions")

	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the session's worktree", `document.querySelector('.session .meta') && document.querySelector('.session .meta').textContent.includes(`+jsString(sess.Worktree.Path)+`)`)
	fits("session")

	b.run("send a prompt",
		chromedp.SetValue(chromedp.CSS(`.composer textarea`), "add a greeting"),
		chromedp.Click(chromedp.CSS(`.composer button[type=submit]`)))
	b.waitJS("the approval dialog", `document.querySelector('dialog#approval').open && document.querySelector('dialog#approval button[data-kind=allow_once]')`)
	b.waitJS("the needs-you badge", `!document.getElementById('needs').hidden`)
	fits("approval")
	if !evalJS[bool](b, phoneVisible(`dialog#approval`)) {
		t.Errorf("the approval dialog reaches past the screen: %v", evalJS[map[string]float64](b, `document.querySelector('dialog#approval').getBoundingClientRect().toJSON()`))
	}
	if !evalJS[bool](b, phoneVisible(`#needs`)) {
		t.Errorf("the need-you badge is not within the screen: %v", evalJS[map[string]float64](b, `document.getElementById('needs').getBoundingClientRect().toJSON()`))
	}
	b.run("allow", js(`document.querySelector('dialog#approval button[data-kind=allow_once]').click()`))
	b.waitJS("the turn's end", `document.querySelector('.turn-foot .badge')`)

	b.run("the providers", chromedp.Navigate(d.client.BaseURL+"/#/providers"))
	b.waitJS("the provider cards", `document.querySelector('[data-provider=shell]')`)
	fits("providers")

	b.run("the pool", chromedp.Navigate(d.client.BaseURL+"/#/pool"))
	b.waitJS("the idle demo agent", `document.querySelector('tr[data-agent=demo] button[data-evict]') && !document.querySelector('tr[data-agent=demo] button[data-evict]').disabled`)
	fits("pool")
	if !evalJS[bool](b, phoneVisible(`tr[data-agent=demo] button[data-evict]`)) {
		t.Errorf("the Evict button is not within the screen: %v", evalJS[map[string]float64](b, `document.querySelector('tr[data-agent=demo] button[data-evict]').getBoundingClientRect().toJSON()`))
	}

	// "Type here" takes the keyboard and gives it to the terminal: keys
	// typed next, without a click into the terminal, reach the shell.
	ps, err := d.client.CreateSession(ctx, createReq(repo, "shell"))
	if err != nil {
		t.Fatal(err)
	}
	b.run("open the shell session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+ps.ID))
	b.waitJS("the terminal tab", `[...document.querySelectorAll('.tabs button')].some(x => x.textContent === 'Terminal' && !x.hidden)`)
	b.run("open the terminal", js(`[...document.querySelectorAll('.tabs button')].find(x => x.textContent === 'Terminal').click()`))
	b.waitJS("the prompt in the terminal", `document.querySelector('.xterm-rows') && document.querySelector('.xterm-rows').textContent.includes('agentpool$')`)
	fits("terminal")
	b.run("click Type here", chromedp.Click(chromedp.Search(`//div[contains(@class,"term-wrap")]//button[text()="Type here"]`), chromedp.NodeVisible))
	b.waitJS("the keyboard taken", `document.querySelector('.term-wrap .muted').textContent === 'you are typing'`)
	b.run("type a command", chromedp.KeyEvent("echo typed-$((2+3))", rawKeyDown), chromedp.KeyEvent("\r", rawKeyDown))
	b.waitJS("the command's output", `document.querySelector('.xterm-rows').textContent.includes('typed-5')`)
	b.shot("phone-terminal-typed")
}
