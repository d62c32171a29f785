package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserPoolSpares: the page's Pool table shows a spare's agent as a
// spare, without a link to a session that does not exist yet and without
// Evict, at desktop width and at a phone's 390 px without overflow.
func TestBrowserPoolSpares(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# project\n"})
	writeScripted(t, home, bin, map[string]any{"slow": spareScript(100)})
	d := startDaemonArgs(t, bin, home, []string{"--spares", "slow=1", "--spares-repo", repo},
		"AGENTPOOL_WORKTREES="+filepath.Join(t.TempDir(), "trees"))
	d.waitSpares("ready", readySpares(1, spareGit(t, repo, "rev-parse", "HEAD")))
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	for _, phone := range []bool{false, true} {
		if phone {
			b.run("phone size", chromedp.EmulateViewport(390, 844))
		}
		b.run("the pool", chromedp.Navigate(d.client.BaseURL+"/#/pool"))
		b.waitJS("the spare's row", `document.querySelector('tr[data-agent=slow] .badge') && [...document.querySelectorAll('tr[data-agent=slow] .badge')].some(e => e.textContent === 'spare')`)
		if !evalJS[bool](b, `document.querySelector('tr[data-agent=slow] button[data-evict]').disabled`) {
			t.Error("a spare's Evict button is enabled")
		}
		if evalJS[bool](b, `!!document.querySelector('tr[data-agent=slow] a[href*="sp-"]')`) {
			t.Error("a spare links to a session")
		}
		if phone {
			if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
				t.Errorf("pool with a spare: wider than the 390 px screen: %q", wide)
			}
		}
		b.shot("pool-spare-" + strings.Replace(map[bool]string{false: "desktop", true: "phone"}[phone], " ", "-", -1))
	}
}
