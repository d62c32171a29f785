package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentpool/agentpool/pool"
)

// TestBrowserReview drives a review round trip on the page, at desktop
// width and at a phone's 390 px: in the whole session's diff, a click on a
// line opens a comment box; two comments are added and sent; the agent
// (which edits the first commented line) answers, and its turn in the
// Changes tab lists both comments, the first addressed and the second
// not. The head links the recorded pull request (rel=noopener) and shows
// the push and pr commands with Copy buttons. Nothing is wider than the
// phone's screen.
func TestBrowserReview(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeReviewAgent(t, home, bin, reviewScript())
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	ctx := context.Background()

	for _, size := range []struct {
		name string
		w, h int64
	}{{"desktop", 1280, 860}, {"phone", 390, 844}} {
		repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"a.go": reviewFile(nil)})
		sess, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "rev", Title: "review on " + size.name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.client.Prompt(ctx, sess.ID, "", "change some lines", true); err != nil {
			t.Fatal(err)
		}
		fits := func(what string) {
			t.Helper()
			if size.w == 390 {
				if wide := evalJS[[]string](b, phoneWide); len(wide) > 0 {
					t.Errorf("%s: wider than the 390 px screen: %q", what, wide)
				}
			}
			t.Logf("screenshot: %s", b.shot(size.name+"-"+what))
		}
		line := func(n int) string {
			return fmt.Sprintf(`document.querySelector('span[data-path="a.go"][data-line="%d"][data-side="new"]')`, n)
		}
		comment := func(n int, text string) {
			t.Helper()
			b.run(fmt.Sprintf("click line %d", n), js(line(n)+`.click()`))
			b.waitJS("the comment box", `document.querySelector('.comment-box textarea') === document.activeElement`)
			b.run("write", insertText(text))
			b.run("add the comment", js(`document.querySelector('[data-add-comment]').click()`))
			b.waitJS("the pending comment", fmt.Sprintf(`document.querySelector('[data-pending="a.go:%d"]')`, n))
		}

		b.run("size", chromedp.EmulateViewport(size.w, size.h))
		b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
		b.waitJS("the session's head", `document.querySelector('.session h1') && document.querySelector('.session h1').textContent === 'review on `+size.name+`'`)
		b.run("the Changes tab", js(`[...document.querySelectorAll('.tabs button')].find(b => b.textContent.startsWith('Changes')).click()`))
		b.waitJS("the turn list", `document.querySelector('.turn-list [data-turn="0"]')`)
		b.run("the whole session's diff", js(`document.querySelector('.turn-list [data-turn="0"]').click()`))
		b.waitJS("commentable lines", line(5))
		comment(5, "say why line 5 changed")
		comment(15, "line 15 needs a test")
		if n := evalJS[int](b, `document.querySelectorAll('.review-pending li').length`); n != 2 {
			t.Errorf("%s: %d pending comments listed; want 2", size.name, n)
		}
		b.run("scroll to the review", js(`document.querySelector('.review-pending').scrollIntoView()`))
		fits("pending-comments")
		b.run("send the review", js(`document.querySelector('[data-send-review]').click()`))
		b.waitJS("the review accepted", `document.querySelectorAll('.review-pending li').length === 0`)
		turn, err := d.client.Turn(ctx, sess.ID, 2, true)
		if err != nil {
			t.Fatalf("%s: turn 2: %v", size.name, err)
		}
		if turn.Review == nil || len(turn.Review.Comments) != 2 || turn.Review.Comments[0].Line != 5 {
			t.Fatalf("%s: turn 2 review = %+v; want the page's two comments", size.name, turn.Review)
		}
		b.waitJS("the conversation after sending", `[...document.querySelectorAll('.tabs button')].find(b => b.textContent.startsWith('Conversation')).getAttribute('aria-selected') !== 'false'`)
		b.run("back to Changes", js(`[...document.querySelectorAll('.tabs button')].find(b => b.textContent.startsWith('Changes')).click()`))
		b.waitJS("turn 2 in the list", `document.querySelector('.turn-list [data-turn="2"]')`)
		b.run("turn 2's diff", js(`document.querySelector('.turn-list [data-turn="2"]').click()`))
		b.waitJS("the review turn 2 answered", `document.querySelector('[data-review-turn="2"]')`)
		b.waitJS("line 5 addressed", `document.querySelector('[data-review-turn="2"] [data-comment="a.go:5"] [data-addressed="yes"]')`)
		b.waitJS("line 15 not addressed", `document.querySelector('[data-review-turn="2"] [data-comment="a.go:15"] [data-addressed="no"]')`)
		b.run("scroll to the answered review", js(`document.querySelector('[data-review-turn="2"]').scrollIntoView()`))
		fits("review-answered")

		// The pull request, once recorded, is a link; the commands to run
		// are shown with Copy buttons.
		pr := "https://github.com/o/r/pull/" + sess.ID
		if _, err := d.client.SetSessionPR(ctx, sess.ID, pr); err != nil {
			t.Fatal(err)
		}
		b.run("reload", chromedp.Reload())
		b.waitJS("the pull request link", `(() => { const a = document.querySelector('[data-pr] a'); return a && a.href === `+jsString(pr)+` && a.relList.contains('noopener') })()`)
		b.run("open the commands", js(`document.querySelector('.ship details').open = true`))
		b.waitJS("the push command", `document.querySelector('[data-copy="agentpool session push `+sess.ID+`"]')`)
		b.waitJS("the pr command", `document.querySelector('[data-copy="agentpool session pr `+sess.ID+`"]')`)
		fits("pull-request")
	}
}
