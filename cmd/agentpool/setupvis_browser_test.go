package main

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserSetupShown: the page shows a trusted setup running — in the
// status badge and the composer, with its output collapsible — and then
// its failure in the conversation, with the exit code and the last lines.
func TestBrowserSetupShown(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	repo := setupRepo(t, d, `{"setup": {"command": ["sh", "-c", "echo installing deps; sleep 3; echo deps.lock is missing; exit 3"]}}`)

	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	sess, err := d.client.CreateSession(context.Background(), createReq(repo, "demo"))
	if err != nil {
		t.Fatal(err)
	}
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the setup running", `document.querySelector('.session-head .badge[data-status="setup"]') && document.querySelector('details.setup[data-setup="running"]')`)
	b.shot("setup-running")
	if st := evalJS[string](b, `document.querySelector('.composer .state').textContent`); !strings.Contains(st, "setup running") {
		t.Errorf("composer state = %q; want it to say the setup runs", st)
	}
	if sum := evalJS[string](b, `document.querySelector('details.setup summary').textContent`); !strings.Contains(sum, "setup running: sh -c echo installing deps") {
		t.Errorf("setup summary = %q; want the command running", sum)
	}
	b.waitJS("the setup failed", `document.querySelector('.setup-failed')`)
	b.shot("setup-failed")
	failed := evalJS[string](b, `document.querySelector('.setup-failed').textContent`)
	for _, w := range []string{"setup failed in ", "with exit code 3", "deps.lock is missing"} {
		if !strings.Contains(failed, w) {
			t.Errorf("failure line = %q; want it to contain %q", failed, w)
		}
	}
	if out := evalJS[string](b, `document.querySelector('pre.setup-out').textContent`); !strings.Contains(out, "installing deps") {
		t.Errorf("setup output = %q; want the command's output", out)
	}
	b.waitJS("the badge no longer says setup", `!document.querySelector('.session-head .badge[data-status="setup"]')`)
	if st := evalJS[string](b, `document.querySelector('.composer .state').textContent`); strings.Contains(st, "setup") {
		t.Errorf("composer state after the setup = %q", st)
	}
}
