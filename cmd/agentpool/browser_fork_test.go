package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserFork: the session view's Fork button asks for the agent and
// an optional turn; a turn that does not exist is refused in a banner,
// making nothing; a fork at turn 1 opens the new session, whose files and
// history are the session's at turn 1.
func TestBrowserFork(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"forky": forkScript(), "other": forkScript()})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"a.txt": "a0\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	src := d.newSessionWith(repo, "forky")
	ss, err := d.client.Session(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	writeIn(t, ss.Worktree.Path, "a.txt", "v1\n")
	if _, err := d.client.Prompt(ctx, src, "", "first", true); err != nil {
		t.Fatal(err)
	}
	writeIn(t, ss.Worktree.Path, "a.txt", "v2 uncommitted\n")
	if _, err := d.client.Prompt(ctx, src, "", "second", true); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+src))
	b.waitJS("the Fork button", `document.querySelector('button[data-fork-open]') && !document.querySelector('button[data-fork-open]').hidden`)
	open := func() {
		b.run("click Fork", chromedp.Click(chromedp.CSS(`button[data-fork-open]`)))
		b.waitJS("the fork dialog", `document.getElementById('confirm').open && document.querySelector('#confirm select[name=fork-agent]')`)
	}
	open()
	b.run("ask for turn 99", js(`document.querySelector('#confirm input[name=fork-turn]').value = '99'`))
	b.run("confirm", chromedp.Click(chromedp.CSS(`#confirm .dlg-foot button.primary`)))
	b.waitJS("the refusal", `document.querySelector('[data-fork=failed]')`)
	if msg := evalJS[string](b, `document.querySelector('[data-fork=failed]').textContent`); !strings.Contains(msg, "turn 99") {
		t.Errorf("refusal banner = %q; want it to name turn 99", msg)
	}
	b.shot("fork-refused")
	if all, _ := d.client.Sessions(ctx); len(all) != 1 {
		t.Errorf("a refused fork left %d sessions; want 1", len(all))
	}

	open()
	b.run("fork at turn 1 with the other agent",
		chromedp.SetValue(chromedp.CSS(`#confirm select[name=fork-agent]`), "other"),
		js(`document.querySelector('#confirm input[name=fork-turn]').value = '1'`))
	b.shot("fork-dialog")
	b.run("confirm", chromedp.Click(chromedp.CSS(`#confirm .dlg-foot button.primary`)))
	b.waitJS("the fork's view", `location.hash.startsWith('#/s/') && decodeURIComponent(location.hash.slice(4)) !== `+jsString(src))
	fid := evalJS[string](b, `decodeURIComponent(location.hash.slice(4))`)
	b.waitJS("the fork's copied turn and its fork note", `document.querySelector(".stream") && document.querySelector(".stream").textContent.includes("first") && document.querySelector(".stream").textContent.includes("forked from "+`+jsString(src)+`+" at turn 1")`)
	b.shot("fork-opened")
	fs, err := d.client.Session(ctx, fid)
	if err != nil {
		t.Fatal(err)
	}
	if fs.ActiveAgent != "other" || fs.LastTurn != 1 {
		t.Errorf("fork = agent %s, last turn %d; want other, 1", fs.ActiveAgent, fs.LastTurn)
	}
	if got := readIn(fs.Worktree.Path, "a.txt"); got != "v1\n" {
		t.Errorf("fork's a.txt = %q; want turn 1's v1", got)
	}
	if got := readIn(ss.Worktree.Path, "a.txt"); got != "v2 uncommitted\n" {
		t.Errorf("the session's a.txt = %q after the fork; want it untouched", got)
	}
}
