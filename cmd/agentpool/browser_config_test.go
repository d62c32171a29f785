package main

import (
	"context"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/agentpool/agentpool/httpapi"
)

// handledKey sends a key that the page handles in its keydown (and
// prevents) as a real keyboard does: CDP sends the key's text in a char
// event of its own, which a real browser never delivers after a prevented
// keydown, so it is left empty.
func handledKey(p *input.DispatchKeyEventParams) {
	if p.Type == input.DispatchKeyEventTypeChar {
		p.Text, p.UnmodifiedText = "", ""
	}
}

// TestBrowserAgentConfig drives the composer's agent controls: the model
// and mode pickers show what the agent offers, a model picked reaches the
// agent, a mode set elsewhere shows live; "/" opens the agent's commands
// with their descriptions and input hints, arrows move, Enter and Tab
// complete, Esc closes; at 390 px nothing is wider than the screen.
func TestBrowserAgentConfig(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeConfigProviders(t, home, bin, nil)
	repo := e2eRepoAt(t, t.TempDir(), map[string]string{"README.md": "# pickers\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	sess, err := d.client.CreateSession(ctx, createReq(repo, "cfg"))
	if err != nil {
		t.Fatal(err)
	}
	d.waitKnown(sess.ID)
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the model picker at fast", `(() => { const s = document.querySelector('.composer select.cfg-model');
		return s && !s.closest('label').hidden && s.value === 'fast' && s.options.length === 2; })()`)
	b.waitJS("the mode picker at default", `(() => { const s = document.querySelector('.composer select.cfg-mode');
		return s && !s.closest('label').hidden && s.value === 'default' && s.options.length === 2; })()`)
	b.shot("pickers")

	b.run("pick the smart model", js(`const s = document.querySelector('select.cfg-model'); s.value = 'smart'; s.dispatchEvent(new Event('change'));`))
	waitFor(t, "the agent on the smart model", func() bool {
		c, err := d.client.AgentConfig(ctx, sess.ID, "cfg")
		return err == nil && len(c.Options) == 1 && c.Options[0].Current == "smart"
	})
	if _, err := d.client.SetAgentConfig(ctx, sess.ID, "cfg", httpapi.ConfigChange{Mode: "plan"}); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the mode picker following the agent to plan", `document.querySelector('select.cfg-mode').value === 'plan'`)
	if v := evalJS[string](b, `document.querySelector('select.cfg-model').value`); v != "smart" {
		t.Errorf("model picker = %q after the mode change; want smart", v)
	}

	menu := `document.querySelector('.cmd-menu')`
	items := menu + `.querySelectorAll('li')`
	text := `document.querySelector('.composer textarea')`
	b.run("type a slash", chromedp.Focus(chromedp.CSS(`.composer textarea`)), chromedp.KeyEvent("/"))
	b.waitJS("the command list", `!`+menu+`.hidden && `+items+`.length === 2`)
	got := evalJS[[]string](b, `[...`+items+`].map(li => li.textContent)`)
	if len(got) != 2 || got[0] != "/helpShow help" || got[1] != "/reviewwhat to reviewReview changes" {
		t.Errorf("command list = %q; want /help and /review with its hint and descriptions", got)
	}
	b.shot("commands")
	b.run("move down", chromedp.KeyEvent(kb.ArrowDown, handledKey))
	if sel := evalJS[string](b, menu+`.querySelector('li.active').dataset.command`); sel != "review" {
		t.Errorf("selected after ArrowDown = %q; want review", sel)
	}
	b.run("complete with Enter", chromedp.KeyEvent(kb.Enter, handledKey))
	b.waitJS("the completed command", text+`.value === '/review ' && `+menu+`.hidden`)
	if n := evalJS[int](b, `document.querySelectorAll('.turn').length`); n != 0 {
		t.Errorf("Enter on the list sent a prompt (%d turns); want it only to complete", n)
	}

	b.run("start over and narrow", js(`const t = `+text+`; t.value = ''; t.dispatchEvent(new Event('input'));`), chromedp.KeyEvent("/he"))
	b.waitJS("one match", `!`+menu+`.hidden && `+items+`.length === 1`)
	b.run("complete with Tab", chromedp.KeyEvent(kb.Tab, handledKey))
	b.waitJS("/help completed", text+`.value === '/help ' && `+menu+`.hidden`)
	b.run("start over", js(`const t = `+text+`; t.value = ''; t.dispatchEvent(new Event('input'));`), chromedp.KeyEvent("/"))
	b.waitJS("the list again", `!`+menu+`.hidden`)
	b.run("Esc closes", chromedp.KeyEvent(kb.Escape, handledKey))
	b.waitJS("the list closed, the text kept", menu+`.hidden && `+text+`.value === '/'`)

	// The prompt goes to the agent with the model and mode picked.
	b.run("send", js(`const t = `+text+`; t.value = ''; t.dispatchEvent(new Event('input'));`), chromedp.KeyEvent("which model?"), chromedp.KeyEvent(kb.Enter, handledKey))
	b.waitJS("the answer", `document.querySelector('.stream').textContent.includes('model=smart mode=plan')`)

	// An agent whose modes are a config option gets a mode picker too.
	s2, err := d.client.CreateSession(ctx, createReq(repo, "cfgmode"))
	if err != nil {
		t.Fatal(err)
	}
	b.run("open the mode-option session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+s2.ID))
	b.waitJS("its mode picker at ask", `(() => { const s = document.querySelector('.composer select.cfg-mode');
		return s && !s.closest('label').hidden && s.value === 'ask' && s.options.length === 2; })()`)
	if !evalJS[bool](b, `document.querySelector('select.cfg-model').closest('label').hidden`) {
		t.Errorf("a model picker shows for an agent that offers no model")
	}
	b.run("pick code", js(`const s = document.querySelector('select.cfg-mode'); s.value = 'code'; s.dispatchEvent(new Event('change'));`))
	waitFor(t, "the agent in mode code", func() bool {
		c, err := d.client.AgentConfig(ctx, s2.ID, "cfgmode")
		return err == nil && len(c.Options) == 1 && c.Options[0].Current == "code"
	})
	b.run("back to the first session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("its model picker", `document.querySelector('select.cfg-model') && document.querySelector('select.cfg-model').value === 'smart'`)

	b.run("phone size", chromedp.EmulateViewport(390, 844))
	b.run("a slash on the phone", chromedp.Focus(chromedp.CSS(`.composer textarea`)), chromedp.KeyEvent("/"))
	b.waitJS("the command list on the phone", `!`+menu+`.hidden`)
	if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
		t.Errorf("wider than the 390 px screen: %q", wide)
	}
	for _, sel := range []string{".cmd-menu", "select.cfg-model", "select.cfg-mode", ".composer button[type=submit]"} {
		if !evalJS[bool](b, phoneVisible(sel)) {
			t.Errorf("%s is not within the 390 px screen: %v", sel, evalJS[map[string]float64](b, `document.querySelector(`+jsString(sel)+`).getBoundingClientRect().toJSON()`))
		}
	}
	b.shot("phone-commands")
}
