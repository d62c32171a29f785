package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
)

// consoleErrors collects what the page logs as errors (a failed request
// included: the browser logs it as an error of source "network") from now
// until the test ends; it returns a function that lists them.
func consoleErrors(t *testing.T, b *browser) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	var mu sync.Mutex
	var got []string
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				got = append(got, fmt.Sprintf("%s %s", m.Text, m.URL))
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// idWhole is a JavaScript expression for session id: the elements of the
// page whose text is the id, as "tag: height/line-height" items for those
// that take more than one line (the id broken), none when each is whole.
func idWhole(id string) string {
	return `[...document.querySelectorAll('#main *')].filter(e => e.children.length === 0 && e.textContent.trim() === ` + jsString(id) + ` && e.offsetParent)
		.map(e => [e, e.getBoundingClientRect().height, parseFloat(getComputedStyle(e).lineHeight)])
		.filter(([e, h, lh]) => h > lh * 1.5).map(([e, h, lh]) => e.tagName.toLowerCase() + '.' + e.className + ': ' + h + '/' + lh)`
}

// navReach is a JavaScript expression: the header's links that are not
// wholly on the screen and unclipped by the bar, by their text.
const navReach = `[...document.querySelectorAll('.top .nav a')].filter(a => {
	const r = a.getBoundingClientRect(), n = a.parentElement.getBoundingClientRect();
	return !(r.width > 0 && r.left >= 0 && r.right <= window.innerWidth && r.left >= n.left - 0.5 && r.right <= n.right + 0.5);
}).map(a => a.textContent)`

// TestBrowserPhoneRoom drives the page at 390 × 844: every link of the
// header is on the screen, nothing is wider than it, a session's id is
// never broken across lines, and an open session gives most of the
// screen to its conversation.
func TestBrowserPhoneRoom(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, providersFile), []byte(browserProviders(t, bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "phone-room"), map[string]string{"README.md": "# phone\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	plain, err := d.client.CreateSession(ctx, createReq(repo, "demo"))
	if err != nil {
		t.Fatal(err)
	}
	req := createReq(repo, "xss")
	req.Title = "Fix the flaky test"
	titled, err := d.client.CreateSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("phone size", chromedp.EmulateViewport(390, 844))
	// A request waiting for an answer: the header's "need you" badge
	// shows beside the links, and the list says "waiting for you".
	if _, err := d.client.Prompt(ctx, plain.ID, "", "add a greeting", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the permission request", func() bool {
		p, err := d.client.Permissions(ctx, plain.ID)
		return err == nil && len(p) > 0
	})

	check := func(page string) {
		t.Helper()
		if w := evalJS[[]float64](b, `[document.documentElement.scrollWidth, document.getElementById('main').scrollWidth, window.innerWidth]`); w[0] > w[2] || w[1] > w[2] {
			t.Errorf("%s: document %v px and main %v px wide on a %v px screen", page, w[0], w[1], w[2])
		}
		if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
			t.Errorf("%s: wider than the 390 px screen: %q", page, wide)
		}
		if off := evalJS[[]string](b, navReach); len(off) > 0 {
			t.Errorf("%s: header links not on the screen: %q", page, off)
		}
		for _, id := range []string{plain.ID, titled.ID} {
			if broken := evalJS[[]string](b, idWhole(id)); len(broken) > 0 {
				t.Errorf("%s: session id %s broken across lines: %q", page, id, broken)
			}
		}
		b.shot("room-" + page)
	}

	b.run("the sessions list", chromedp.Navigate(d.client.BaseURL+"/#/"))
	b.waitJS("the sessions table", `document.querySelectorAll('tr[data-session]').length === 2 && !document.getElementById('needs').hidden && document.querySelector('[data-status=waiting]')`)
	check("sessions")

	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+plain.ID))
	b.waitJS("the composer and the agent", `document.querySelector('.composer textarea') && document.querySelector('.session .meta') && document.querySelector('.session .chip')`)
	b.waitJS("the approval dialog", `document.querySelector('dialog#approval').open`)
	b.run("put the dialog aside", js(`document.querySelector('dialog#approval').close()`))
	check("session")
	room := evalJS[[]float64](b, `[document.querySelector('.stream').getBoundingClientRect().height, window.innerHeight]`)
	if room[0] < 0.55*room[1] {
		t.Errorf("the conversation gets %.0f px of the %.0f px screen; want at least 55%%", room[0], room[1])
	}

	// The session's details stay one tap away.
	if !evalJS[bool](b, phoneVisible(`.session-head [data-details]`)) {
		t.Errorf("no Details button on the screen for the session's folded details")
	}
	b.run("show the details", chromedp.Click(chromedp.CSS(`.session-head [data-details]`), chromedp.NodeVisible))
	b.waitJS("the worktree path", `document.querySelector('.session .meta').getBoundingClientRect().height > 0 && document.querySelector('.session .meta').textContent.includes(`+jsString(plain.Worktree.Path)+`)`)
	check("session-details")
	b.run("allow", js(`document.querySelector('.perm-line button').click()`))
	b.waitJS("the approval dialog", `document.querySelector('dialog#approval').open && document.querySelector('dialog#approval button[data-kind=allow_once]')`)
	b.run("allow once", js(`document.querySelector('dialog#approval button[data-kind=allow_once]').click()`))
	b.waitJS("the turn's end", `document.querySelector('section.turn[data-turn="1"] .turn-foot .badge:not(.run)')`)
	check("session-ended")

	b.run("the pool", chromedp.Navigate(d.client.BaseURL+"/#/pool"))
	b.waitJS("the pool", `document.querySelector('tr[data-agent]')`)
	check("pool")
	b.run("the providers", chromedp.Navigate(d.client.BaseURL+"/#/providers"))
	b.waitJS("the cards", `document.querySelector('[data-provider=demo]')`)
	check("providers")
	b.run("the attempts", chromedp.Navigate(d.client.BaseURL+"/#/attempts"))
	b.waitJS("the form", `document.querySelector('input[data-agent=demo]')`)
	check("attempts")
}

// TestBrowserDesktopWords drives the page at 1280 × 800 through what the
// second new user met: a session opens with its last turn's head clear of
// the tabs; a huge prompt shows as a short head that expands; a cancelled
// turn leaves no tool call pending and says who cancelled; a remembered
// "Always allow" is named as such in the audit and the timeline; the pool
// and the list use the same words; the providers say "ready" as the CLI
// does, ready ones first, terminal agents in words; the attempts form
// starts at one attempt; and a repository without a setup file logs no
// error.
func TestBrowserDesktopWords(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, providersFile), []byte(browserProviders(t, bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "words"), map[string]string{"README.md": "# words\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	b := newBrowser(t, exe)
	errs := consoleErrors(t, b)
	browserLogin(t, b, d)
	b.run("desktop size", chromedp.EmulateViewport(1280, 800))

	// A huge prompt, to the markup agent, which answers without asking.
	huge, err := d.client.CreateSession(ctx, createReq(repo, "xss"))
	if err != nil {
		t.Fatal(err)
	}
	long := "Refactor the parser as described below.\n" + strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2700)
	if _, err := d.client.Prompt(ctx, huge.ID, "", long, true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, huge.ID, "", "and a short one", true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, huge.ID, "", long, true); err != nil {
		t.Fatal(err)
	}
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+huge.ID))
	b.waitJS("the third turn's end", `document.querySelector('section.turn[data-turn="3"] .turn-foot .badge:not(.run)')`)
	b.run("settle", chromedp.Sleep(300e6))
	b.shot("words-open")
	// The last turn's head is below the tabs, whole, not under them.
	if got := evalJS[[]float64](b, `[document.querySelector('.tabs').getBoundingClientRect().bottom, document.querySelector('.stream').getBoundingClientRect().top,
		document.querySelector('section.turn[data-turn="3"] .turn-head').getBoundingClientRect().top]`); got[2] < got[0] || got[2] < got[1] {
		t.Errorf("turn 3's head starts at %.0f px, under the tabs (bottom %.0f px) or above the conversation (top %.0f px)", got[2], got[0], got[1])
	}
	// And the view is at the conversation's end: the last turn's foot shows.
	if got := evalJS[[]float64](b, `[document.querySelector('section.turn[data-turn="3"] .turn-foot').getBoundingClientRect().bottom, document.querySelector('.stream').getBoundingClientRect().bottom]`); got[0] > got[1] {
		t.Errorf("turn 3's foot ends at %.0f px, below the conversation's bottom (%.0f px): the session did not open at its end", got[0], got[1])
	}
	head := evalJS[[]float64](b, `[document.querySelector('section.turn[data-turn="1"] .turn-head').getBoundingClientRect().height, document.querySelector('section.turn[data-turn="1"] .turn-head .prompt').textContent.length]`)
	if head[0] > 90 || head[1] > 400 {
		t.Errorf("a %d-byte prompt's head is %.0f px high with %.0f characters; want a few lines", len(long), head[0], head[1])
	}
	if evalJS[bool](b, `!!document.querySelector('section.turn[data-turn="1"] .turn-head [data-expand]')`) {
		b.run("expand the prompt", js(`document.querySelector('section.turn[data-turn="1"] .turn-head [data-expand]').click()`))
		b.waitJS("the whole prompt", `document.querySelector('section.turn[data-turn="1"] .turn-head .prompt').textContent.length >= `+fmt.Sprint(len(long)-10))
		b.shot("words-expanded")
	} else {
		t.Error("no button to show a cut prompt whole")
	}

	// A turn cancelled while its agent waits for an answer.
	demo, err := d.client.CreateSession(ctx, createReq(repo, "demo"))
	if err != nil {
		t.Fatal(err)
	}
	b.run("open the demo session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+demo.ID))
	b.waitJS("the composer", `document.querySelector('.composer textarea')`)
	b.run("send a prompt",
		chromedp.SetValue(chromedp.CSS(`.composer textarea`), "add a greeting"),
		chromedp.Click(chromedp.CSS(`.composer button[type=submit]`)))
	b.waitJS("the approval dialog", `document.querySelector('dialog#approval').open && document.querySelector('dialog#approval button[data-kind=allow_always]')`)

	// Meanwhile the list and the pool both say the session waits for you.
	b.run("the pool", chromedp.Navigate(d.client.BaseURL+"/#/pool"))
	b.waitJS("the demo agent", `document.querySelector('tr[data-agent=demo] td:nth-child(3) .badge')`)
	if got := evalJS[string](b, `document.querySelector('tr[data-agent=demo] td:nth-child(3) .badge').textContent`); got != "waiting for you" {
		t.Errorf("the pool says the agent waiting for an answer is %q; want %q as the list says", got, "waiting for you")
	}
	b.shot("words-pool-waiting")
	b.run("the list", chromedp.Navigate(d.client.BaseURL+"/#/"))
	b.waitJS("the waiting session", `document.querySelector('tr[data-session=`+jsString(demo.ID)+`] [data-status=waiting]')`)

	b.run("back to the demo session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+demo.ID))
	b.waitJS("the approval dialog again", `document.querySelector('dialog#approval').open`)
	b.run("put the dialog aside", js(`document.querySelector('dialog#approval').close()`))
	if err := d.client.Cancel(ctx, demo.ID); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the cancelled turn", `document.querySelector('section.turn[data-turn="1"] .turn-foot .badge:not(.run)')`)
	b.shot("words-cancelled")
	if got := evalJS[string](b, `[...document.querySelectorAll('section.turn[data-turn="1"] .tool')].map(x => x.innerText.replace(/\s+/g, ' ').trim()).join(' | ')`); strings.Contains(got, "pending") || !strings.Contains(got, "Write AGENTPOOL_DEMO.md") {
		t.Errorf("cancelled turn's tool cards = %q; want the write not pending", got)
	}
	if got := evalJS[string](b, `document.querySelector('section.turn[data-turn="1"]').innerText`); strings.Contains(got, "by cancel") || !strings.Contains(got, "cancelled with the turn") && !strings.Contains(got, "cancelled: the turn ended") {
		t.Errorf("cancelled turn reads:\n%s\nwant its request cancelled with the turn (the agent may end the turn before the request is cancelled: \"the turn ended\"), not %q", got, "by cancel")
	}

	// Always allow, then a turn that the remembered answer lets through.
	b.run("send a second prompt",
		chromedp.SetValue(chromedp.CSS(`.composer textarea`), "add a greeting again"),
		chromedp.Click(chromedp.CSS(`.composer button[type=submit]`)))
	b.waitJS("the approval dialog", `document.querySelector('dialog#approval').open && document.querySelector('dialog#approval button[data-kind=allow_always]')`)
	b.run("allow always", chromedp.Click(chromedp.CSS(`dialog#approval button[data-kind=allow_always]`)))
	b.waitJS("the second turn's end", `document.querySelector('section.turn[data-turn="2"] .turn-foot .badge:not(.run)')`)
	b.run("send a third prompt",
		chromedp.SetValue(chromedp.CSS(`.composer textarea`), "and a farewell"),
		chromedp.Click(chromedp.CSS(`.composer button[type=submit]`)))
	b.waitJS("the third turn's end", `document.querySelector('section.turn[data-turn="3"] .turn-foot .badge:not(.run)')`)
	third := evalJS[string](b, `document.querySelector('section.turn[data-turn="3"]').innerText`)
	if strings.Contains(third, "by remembered") || !strings.Contains(third, "remembered from an earlier Always allow") {
		t.Errorf("the remembered answer reads:\n%s", third)
	}
	b.shot("words-remembered")
	b.run("the audit", js(`[...document.querySelectorAll('.tabs button')].find(x => x.textContent.startsWith('Audit')).click()`))
	b.waitJS("the audit's rows", `document.querySelectorAll('.tab-body:not([hidden]) tbody tr').length >= 4`)
	rows := evalJS[[]string](b, `[...document.querySelectorAll('.tab-body:not([hidden]) tbody tr')].map(r => [...r.children].map(c => c.textContent).join(' | '))`)
	for _, r := range rows {
		if strings.Contains(r, "request ") || strings.Contains(r, "remembered · allow_once") {
			t.Errorf("audit row %q names a request by its id or a remembered Always allow as allow_once", r)
		}
	}
	if !strings.Contains(strings.Join(rows, "\n"), "remembered (Always allow)") {
		t.Errorf("audit rows lack the remembered Always allow:\n%s", strings.Join(rows, "\n"))
	}
	b.shot("words-audit")

	// Providers: the CLI's word, ready ones first, terminal agents in words.
	b.run("the providers", chromedp.Navigate(d.client.BaseURL+"/#/providers"))
	b.waitJS("the cards", `document.querySelector('[data-provider=demo] [data-status]') && document.querySelector('[data-provider=shell]')`)
	if got := evalJS[string](b, `document.querySelector('[data-provider=demo] [data-status]').textContent`); !strings.EqualFold(got, "ready") {
		t.Errorf("a ready provider's badge says %q; want ready, as the CLI says", got)
	}
	order := evalJS[[]string](b, `[...document.querySelectorAll('[data-provider] [data-status]')].map(s => s.dataset.status)`)
	lastReady, firstOther := -1, len(order)
	for i, s := range order {
		if s == "ready" {
			lastReady = i
		} else if i < firstOther {
			firstOther = i
		}
	}
	if lastReady > firstOther {
		t.Errorf("providers in the order %q; want the ready ones first", order)
	}
	for _, id := range []string{"shell", "claude-cli"} {
		text := evalJS[string](b, `(document.querySelector('[data-provider=`+jsString(id)+`]') || {innerText: ''}).innerText`)
		if text == "" {
			continue
		}
		if !strings.Contains(text, "terminal agent") || strings.Contains(text, `\$`) || strings.Contains(text, "pty") || strings.Contains(text, "input row") {
			t.Errorf("the %s card describes it as:\n%s\nwant a terminal agent in words", id, text)
		}
	}
	b.shot("words-providers")

	// The attempts form: one attempt of each agent to start with, and its
	// label clear of the fields.
	b.run("the attempts", chromedp.Navigate(d.client.BaseURL+"/#/attempts"))
	b.waitJS("the form", `document.querySelector('input[data-agent=demo]')`)
	if got := evalJS[string](b, `document.querySelector('input[data-agent=demo]').value`); got != "1" {
		t.Errorf("attempts of demo start at %q; want 1", got)
	}
	if gap := evalJS[float64](b, `(() => { const f = document.querySelector('input[data-agent]').closest('.field'); const l = f.firstChild;
		const r = document.createRange(); r.selectNodeContents(l); return f.querySelector('input[data-agent]').getBoundingClientRect().top - r.getBoundingClientRect().bottom; })()`); gap < 4 {
		t.Errorf("the label \"Attempts per agent\" is %.0f px above its fields; want some room", gap)
	}
	b.shot("words-attempts")

	if got := errs(); len(got) > 0 {
		t.Errorf("the page logged errors: %q", got)
	}
}
