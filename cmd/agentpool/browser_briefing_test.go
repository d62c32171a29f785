package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserBriefing switches a session's agent with the page's agent
// picker: the agent taking over gets the pool's briefing, and the turn
// shows it folded (a collapsed block saying for whom, what it covers
// and its size) that opens to its text.
func TestBrowserBriefing(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	_, betaLog := briefingProviders(t, home, bin)
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# briefing\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	sess, err := d.client.CreateSession(ctx, createReq(repo, "alpha"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, sess.ID, "", "write some notes", true); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the picker offers beta", `(() => { const p = document.querySelector('.composer select'); return p && [...p.options].some(o => o.value === 'beta'); })()`)
	b.run("pick beta and send", js(`const p = document.querySelector('.composer select'); p.value = 'beta'; p.dispatchEvent(new Event('change'));
		const t = document.querySelector('textarea[name=prompt]'); t.value = 'what do the notes say?';
		document.querySelector('.composer button[type=submit]').click();`))
	b.waitJS("the folded briefing", `(() => { const e = document.querySelector('details.briefing'); return e && !e.open &&
		e.querySelector('summary').textContent.startsWith('Briefing for beta (full history): turn 1 · ') && / B · sent as text$/.test(e.querySelector('summary').textContent); })()`)
	b.waitJS("the turn's answer", `[...document.querySelectorAll('.stream')].some(e => e.textContent.includes('Beta read the notes.'))`)
	if vis := evalJS[bool](b, `(() => { const p = document.querySelector('details.briefing pre'); return p.checkVisibility(); })()`); vis {
		t.Errorf("the briefing's text shows while folded")
	}
	b.shot("briefing-folded")
	b.run("unfold it", js(`document.querySelector('details.briefing summary').click();`))
	b.waitJS("its text", `(() => { const p = document.querySelector('details.briefing pre'); return p && p.checkVisibility() && p.textContent.includes('### Turn 1 · alpha'); })()`)
	b.shot("briefing-open")
	got := readPrompts(t, betaLog)
	if len(got) != 1 || len(got[0]) != 2 || !strings.Contains(got[0][0].Text, "Briefing from agentpool") || got[0][1].Text != "what do the notes say?" {
		t.Errorf("beta's prompts = %+v; want the briefing, then the user's words", got)
	}
}
