package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserTrustSetup: a session of a repository whose .agentpool.json
// is untrusted shows the file's content as text with a button that trusts
// exactly what is shown and runs the setup. The file it copies is then
// named in the session's changes as copied, never with its content.
func TestBrowserTrustSetup(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	setup := `{"copy": ["local.env"], "setup": {"command": ["sh", "-c", "echo '<img src=x onerror=window.__xss=1>' > marker"]}}`
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "trust repo"), map[string]string{"README.md": "# p\n", ".agentpool.json": setup, ".gitignore": "local.env\n"})
	if err := os.WriteFile(filepath.Join(repo, "local.env"), []byte("TOKEN=hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	sess, err := d.client.CreateSession(ctx, createReq(repo, "demo"))
	if err != nil {
		t.Fatal(err)
	}
	d.waitEvent(sess.ID, "setup.untrusted")

	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the trust notice", `document.querySelector('.trust-notice button')`)
	b.shot("trust-notice")
	shown := evalJS[string](b, `document.querySelector('.trust-content').textContent`)
	if shown != setup || evalJS[bool](b, `!!window.__xss || !!document.querySelector('.trust-notice img')`) {
		t.Errorf("the notice shows %q; want the file's content as text", shown)
	}
	if text := evalJS[string](b, `document.querySelector('.trust-notice').textContent`); !strings.Contains(text, "agentpool trust") {
		t.Errorf("the notice does not give the CLI command: %q", text)
	}
	b.run("trust and run", chromedp.Click(chromedp.CSS(`.trust-notice button`)))
	d.waitEvent(sess.ID, "setup.ended")
	if got, err := os.ReadFile(filepath.Join(sess.Worktree.Path, "marker")); err != nil || !strings.Contains(string(got), "<img") {
		t.Errorf("marker = %q, %v; want the trusted setup's output", got, err)
	}
	b.waitJS("the notice gone", `!document.querySelector('.trust-notice') || document.querySelector('.trust-notice').parentNode.hidden`)
	if l, err := d.client.TrustList(ctx); err != nil || len(l) != 1 {
		t.Errorf("trusted after the click: %v, %v; want the repository", l, err)
	}

	// The copied file is named in the whole session's changes, as copied.
	b.run("open the changes", js(`[...document.querySelectorAll('.tabs button')].find(x => x.textContent.startsWith('Changes')).click()`))
	b.waitJS("the copied file named", `document.querySelector('.copied-files') && document.querySelector('.copied-files').textContent.includes('local.env')`)
	b.shot("copied-in-changes")
	if html := evalJS[string](b, `document.documentElement.outerHTML`); strings.Contains(html, "hunter2") {
		t.Error("the page shows the content of a copied file")
	}
}
