package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/attempts"
	"github.com/chromedp/chromedp"
)

// TestBrowserAttempts starts attempts of three providers from the page,
// one of whose check fails; the attempts show side by side with their
// stats, check results and diffs, in columns that stack at a phone's
// 390 px with nothing wider than the screen; Pick merges the chosen one.
func TestBrowserAttempts(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{
		"alpha": writerScript("alpha", map[string]string{"alpha.txt": "one\ntwo\n"}),
		"beta":  writerScript("beta", map[string]string{"beta.txt": "one\n"}),
		"gamma": writerScript("gamma", map[string]string{"BROKEN": "the check fails\n"}),
	})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# attempts\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("desktop size", chromedp.EmulateViewport(1280, 900))

	b.run("the attempts view", chromedp.Navigate(d.client.BaseURL+"/#/attempts"))
	b.waitJS("the form with the providers", `document.querySelectorAll('input[data-agent]').length >= 3`)
	b.run("fill the form and start", js(`(() => {
		const f = document.querySelector('form');
		f.querySelector('[name=prompt]').value = 'do the work';
		f.querySelector('[name=repo]').value = `+jsString(repo)+`;
		f.querySelector('[name=check]').value = 'test ! -e BROKEN';
		for (const n of f.querySelectorAll('input[data-agent]')) n.value = ['alpha', 'beta', 'gamma'].includes(n.dataset.agent) ? 1 : 0;
		f.querySelector('button[type=submit]').click();
	})()`))
	b.waitJS("three columns, every check ended and every diff shown", `document.querySelectorAll('.attempt-col').length === 3 &&
		document.querySelectorAll('[data-check=passed]').length === 2 && document.querySelectorAll('[data-check=failed]').length === 1 &&
		document.querySelectorAll('.attempt-col .diff').length === 3`)
	if got := evalJS[string](b, `document.querySelector('.attempt-col:has([data-check=failed]) strong').textContent`); got != "gamma" {
		t.Errorf("the failed check is %q's; want gamma's", got)
	}
	if n := evalJS[int](b, `new Set([...document.querySelectorAll('.attempt-col')].map(c => Math.round(c.getBoundingClientRect().top))).size`); n != 1 {
		t.Errorf("on a desktop the attempts are in %d rows; want side by side", n)
	}
	b.shot("attempts-desktop")

	b.run("phone size", chromedp.EmulateViewport(390, 844))
	if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
		t.Errorf("attempts: wider than the 390 px screen: %q", wide)
	}
	if n := evalJS[int](b, `new Set([...document.querySelectorAll('.attempt-col')].map(c => Math.round(c.getBoundingClientRect().left))).size`); n != 1 {
		t.Errorf("on a phone the attempts are in %d columns; want them stacked", n)
	}
	b.shot("attempts-phone")
	b.run("desktop size again", chromedp.EmulateViewport(1280, 900))

	b.run("pick alpha's", js(`[...document.querySelectorAll('.attempt-col')].find(c => c.querySelector('strong').textContent === 'alpha').querySelector('[data-pick]').click()`))
	b.waitJS("the confirm dialog", `document.querySelector('dialog#confirm[open] button.primary') !== null`)
	b.shot("attempts-pick-confirm")
	b.run("confirm", js(`document.querySelector('dialog#confirm[open] button.primary').click()`))
	b.waitJS("alpha picked", `[...document.querySelectorAll('.attempt-col.picked strong')].some(s => s.textContent === 'alpha') && document.querySelectorAll('[data-pick]').length === 0`)
	b.shot("attempts-picked")
	if bs, err := os.ReadFile(filepath.Join(repo, "alpha.txt")); err != nil || string(bs) != "one\ntwo\n" {
		t.Errorf("main checkout's alpha.txt = %q, %v; want the picked attempt's work", bs, err)
	}
	sets, err := d.client.ListAttempts(context.Background())
	if err != nil || len(sets) != 1 || sets[0].State != "picked" {
		t.Errorf("sets = %+v, %v", sets, err)
	}
}

// TestBrowserAttemptsPermissions: an attempt whose agent asks a
// permission says so on the set's page, with what it asks, and its Answer
// button opens the approval dialog, whose answer lets the attempt end;
// the list of sets marks the set as waiting for the user meanwhile.
func TestBrowserAttemptsPermissions(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"scripted": mcpScript()})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# attempts\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	set, err := d.client.StartAttempts(context.Background(), attempts.Request{Prompt: "from the page", Repo: repo, Agent: "scripted", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("desktop size", chromedp.EmulateViewport(1280, 900))

	b.run("the attempts list", chromedp.Navigate(d.client.BaseURL+"/#/attempts"))
	b.waitJS("the set marked as waiting for the user", `document.querySelector('tr[data-set] [data-asks]') !== null`)
	b.run("the set's page", chromedp.Navigate(d.client.BaseURL+"/#/a/"+set.ID))
	b.waitJS("the request in the attempt's column", `document.querySelector('.attempt-col .attempt-asks [data-answer]') !== null`)
	if got := evalJS[string](b, `document.querySelector('.attempt-asks').textContent`); !strings.Contains(got, "Write notes.txt") || !strings.Contains(got, "rejected in") {
		t.Errorf("the attempt's requests say %q; want what it asks and its deadline", got)
	}
	b.shot("attempts-permission")
	b.run("answer", js(`document.querySelector('.attempt-asks [data-answer]').click()`))
	b.waitJS("the approval dialog", `document.querySelector('dialog#approval[open] button[data-kind=allow_once]') !== null`)
	b.run("allow once", js(`document.querySelector('dialog#approval[open] button[data-kind=allow_once]').click()`))
	b.waitJS("the attempt done, asking nothing", `document.querySelector('[data-state=done]') !== null && document.querySelector('.attempt-asks') === null`)
	sess, err := d.client.Session(context.Background(), set.Attempts[0].Session)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(sess.Worktree.Path, "notes.txt")); string(got) != "from the page\n" {
		t.Errorf("the attempt's notes.txt = %q, %v; want it written once allowed on the page", got, err)
	}
}
