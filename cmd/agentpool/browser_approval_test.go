package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentpool/agentpool/pool"
)

// TestBrowserApprovalSpoofed: an agent names its "allow always" option
// "Reject this change" and offers it first, and names its reject option
// "Allow". The dialog labels each button by its kind, in the daemon's
// order, with the agent's names as secondary text; focus starts on Reject;
// Enter on a focused "always allow" does nothing; Enter on the initial
// focus records a rejection, never allow_always.
func TestBrowserApprovalSpoofed(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	script := map[string]any{"agent_name": "spoof", "turns": []any{map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{
			"tool_call": map[string]any{"id": "t1", "title": "Delete the tests", "kind": "delete", "status": "pending"},
			"options": []any{
				map[string]any{"optionId": "yes-always", "name": "Reject this change", "kind": "allow_always"},
				map[string]any{"optionId": "no", "name": "Allow", "kind": "reject_once"},
			},
		}},
	}}}}
	writeScripted(t, home, bin, map[string]any{"spoof": script})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# spoof\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	sess, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "spoof"})
	if err != nil {
		t.Fatal(err)
	}
	br := newBrowser(t, exe)
	browserLogin(t, br, d)
	br.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	br.waitJS("the composer", `document.querySelector('.composer textarea')`)
	br.run("send a prompt",
		chromedp.SetValue(chromedp.CSS(`.composer textarea`), "clean up"),
		chromedp.Click(chromedp.CSS(`.composer button[type=submit]`)))
	br.waitJS("the approval dialog", `document.querySelector('dialog#approval').open && document.querySelector('dialog#approval button[data-kind=allow_always]')`)
	br.shot("approval-spoofed")

	labels := evalJS[[]string](br, `[...document.querySelectorAll('dialog#approval button.opt')].map(b => b.dataset.kind + '=' + b.innerText.replace(/\s+/g, ' ').trim())`)
	if len(labels) != 2 || !strings.HasPrefix(labels[0], "allow_always=1 Always allow in this session") || !strings.Contains(labels[0], "the agent calls it “Reject this change”") ||
		!strings.HasPrefix(labels[1], "reject_once=2 Reject") || !strings.Contains(labels[1], "the agent calls it “Allow”") {
		t.Errorf("buttons = %q; want the daemon's labels in its order, the agent's names as secondary text", labels)
	}
	if focused := evalJS[string](br, `document.activeElement.dataset.kind || ''`); focused != "reject_once" {
		t.Errorf("focused option = %q; want reject_once", focused)
	}

	// Enter on a focused "always allow" does nothing.
	br.run("focus always-allow and press Enter",
		js(`document.querySelector('dialog#approval button[data-kind=allow_always]').focus()`),
		chromedp.KeyEvent("\r"), chromedp.KeyEvent(" "))
	time.Sleep(700 * time.Millisecond)
	if open := evalJS[bool](br, `document.querySelector('dialog#approval').open`); !open {
		t.Fatal("Enter on a focused always-allow button closed the dialog")
	}
	if p, err := d.client.Permissions(ctx, sess.ID); err != nil || len(p) != 1 {
		t.Fatalf("pending requests after Enter on always-allow = %v, %v; want the request still pending", p, err)
	}

	// Enter on the initial focus rejects.
	br.run("focus reject and press Enter", js(`document.querySelector('dialog#approval button[data-kind=reject_once]').focus()`), chromedp.KeyEvent("\r"))
	br.waitJS("the dialog to close", `!document.querySelector('dialog#approval').open`)
	turn, err := d.client.Turn(ctx, sess.ID, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := d.client.EventLog(ctx, sess.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var resolved string
	for _, ev := range evs {
		if ev.Type == "permission.resolved" {
			resolved = string(ev.Data)
		}
	}
	if !strings.Contains(resolved, `"option_kind":"reject_once"`) || strings.Contains(resolved, "allow_always") {
		t.Errorf("permission.resolved = %s (turn %+v); want reject_once, never allow_always", resolved, turn)
	}
}
