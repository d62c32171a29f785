package httpapi

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/httpapi/apitest"
)

// newLoginLink asks the test server for a login link with the token.
func newLoginLink(t *testing.T, e *testEnv) LoginLink {
	t.Helper()
	status, _, body := e.send(t, apiCall{method: "POST", path: "/v1/login-links"})
	if status != http.StatusCreated {
		t.Fatalf("POST /v1/login-links status = %d; want 201 (%s)", status, body)
	}
	var l LoginLink
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("login link %s: %v", body, err)
	}
	return l
}

// codeOf returns the code in a login link's fragment.
func codeOf(t *testing.T, link string) string {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatalf("login link %q: %v", link, err)
	}
	q, err := url.ParseQuery(u.Fragment)
	if err != nil || q.Get("code") == "" || u.RawQuery != "" || u.Path != "/login" {
		t.Fatalf("login link %q; want /login#code=CODE", link)
	}
	return q.Get("code")
}

// redeem posts code to /v1/login and returns the status and answer.
func redeem(t *testing.T, base, code string) (int, Login) {
	t.Helper()
	resp, err := http.Post(base+"/v1/login", "application/json", strings.NewReader(`{"code":`+strconv.Quote(code)+`}`))
	if err != nil {
		t.Fatalf("POST /v1/login: %v", err)
	}
	defer resp.Body.Close()
	var l Login
	if resp.StatusCode == http.StatusCreated {
		if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
			t.Fatalf("POST /v1/login answer: %v", err)
		}
	}
	return resp.StatusCode, l
}

// pageLogin logs a page in through a new link and returns its credential.
func pageLogin(t *testing.T, e *testEnv) Login {
	t.Helper()
	status, l := redeem(t, e.ts.URL, codeOf(t, newLoginLink(t, e).URL))
	if status != http.StatusCreated || !strings.HasPrefix(l.Credential, PageCredentialPrefix) || l.ID == "" {
		t.Fatalf("redeem a fresh code = %d %+v; want 201 with an %s credential and an id", status, l, PageCredentialPrefix)
	}
	return l
}

// pageRunBearer authenticates l's page by challenge, as the page does, and
// returns its run bearer.
func pageRunBearer(t *testing.T, base string, l Login) string {
	t.Helper()
	b, err := apitest.PageBearer(t.Context(), nil, base, l.ID, l.Credential)
	if err != nil || !strings.HasPrefix(b, RunBearerPrefix) {
		t.Fatalf("PageBearer(%s) = %q, %v; want an %s run bearer", l.ID, b, err, RunBearerPrefix)
	}
	return b
}

// credCall sends a request with the headers given (no token) and returns
// the status and body.
func credCall(t *testing.T, base, method, path, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// bearerOf is the Authorization header of a credential.
func bearerOf(cred string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + cred}
}

func TestLoginLinkOnce(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	l := newLoginLink(t, e)
	if !strings.HasPrefix(l.URL, e.ts.URL+"/login#code=") {
		t.Fatalf("login link = %q; want %s/login#code=...", l.URL, e.ts.URL)
	}
	code := codeOf(t, l.URL)
	if d := time.Until(l.ExpiresAt); d <= 0 || d > LoginLinkTTL {
		t.Errorf("expires in %v; want within %v", d, LoginLinkTTL)
	}
	if strings.Contains(l.URL, e.token) {
		t.Errorf("login link %q holds the token", l.URL)
	}
	// The login page is served without the code (which stays in the
	// browser) and does not use it up.
	resp, err := http.Get(l.URL)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") ||
		!strings.Contains(string(page), "/assets/js/login.js") || len(resp.Cookies()) != 0 {
		t.Errorf("GET /login = %d, CSP %q, cookies %v; want the login page, a strict CSP, no cookie", resp.StatusCode, resp.Header.Get("Content-Security-Policy"), resp.Cookies())
	}
	status, login := redeem(t, e.ts.URL, code)
	if status != http.StatusCreated || !strings.HasPrefix(login.Credential, PageCredentialPrefix) || login.ID == "" {
		t.Fatalf("redeem = %d %+v; want 201 with a credential", status, login)
	}
	if d := time.Until(login.ExpiresAt); d <= PageCredentialTTL-time.Minute || d > PageCredentialTTL {
		t.Errorf("credential expires in %v; want %v", d, PageCredentialTTL)
	}
	if strings.Contains(login.Credential, e.token) {
		t.Error("the page credential holds the token")
	}
	// A second use fails, and says what to do; so does a code never issued.
	for _, c := range []string{code, "made-up", ""} {
		st, b := credCall(t, e.ts.URL, "POST", "/v1/login", `{"code":`+strconv.Quote(c)+`}`, nil)
		if st != http.StatusUnauthorized || !strings.Contains(b, CodeLoginCode) || !strings.Contains(b, "agentpool open") {
			t.Errorf("redeem %q again = %d %s; want 401 %s naming agentpool open", c, st, b, CodeLoginCode)
		}
	}
	// A form post (what another origin's page could send) is not JSON.
	if st, _ := credCall(t, e.ts.URL, "POST", "/v1/login", "code=x", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); st != http.StatusUnsupportedMediaType {
		t.Errorf("form-encoded login = %d; want 415", st)
	}
}

func TestLoginCodeExpires(t *testing.T) {
	var l loginCodes
	now := time.Now()
	code, err := l.add(now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.use(now.Add(61*time.Second), code) {
		t.Error("use after expiry = true; want false")
	}
	for range maxLoginCodes + 5 {
		if _, err := l.add(now, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if len(l.codes) > maxLoginCodes {
		t.Errorf("%d codes kept; want at most %d", len(l.codes), maxLoginCodes)
	}
}

// oldSessionCookie is the agentpool_session cookie earlier versions set
// after a login link: an HMAC keyed by the token, valid 7 days. A page on
// another port of the host got it from the browser.
func oldSessionCookie(token string) string {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	body := "v1." + strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString(nonce)
	k := sha256.Sum256([]byte("agentpool session cookie\x00" + token))
	m := hmac.New(sha256.New, k[:])
	m.Write([]byte(body))
	return "agentpool_session=" + body + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// The attack of issue 22: a browser's cookie, captured by a page on
// another port, plus a forged Origin, must authorize nothing.
func TestCookieIgnored(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	forged := map[string]string{"Cookie": oldSessionCookie(e.token), "Origin": e.ts.URL, "Sec-Fetch-Site": "same-origin",
		"Content-Type": "application/merge-patch+json"}
	for _, c := range []struct{ method, path, body string }{
		{"PATCH", "/v1/providers/escaped", `{"extends":"acp","command":["sh","-c","id"],"sandbox":{"enabled":false}}`},
		{"POST", "/v1/providers/escaped/probe", ""},
		{"GET", "/v1/sessions", ""},
		{"POST", "/v1/login-links", ""},
		{"POST", "/v1/logout", ""},
		{"GET", "/v1/nope", ""},
	} {
		if st, b := credCall(t, e.ts.URL, c.method, c.path, c.body, forged); st != http.StatusUnauthorized {
			t.Errorf("%s %s with the old cookie and a forged Origin = %d %s; want 401", c.method, c.path, st, b)
		}
	}
	if _, err := os.Stat(e.file); err == nil {
		t.Errorf("providers.json was written by a request with only a cookie")
	}
}

func TestPageCredential(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	l := pageLogin(t, e)
	rb := pageRunBearer(t, e.ts.URL, l)
	auth := bearerOf(rb)
	tests := []struct {
		name, method, path string
		header             map[string]string
		want               int
	}{
		{"get", "GET", "/v1/sessions", auth, 200},
		{"post, no origin needed", "POST", "/v1/sessions/s1/cancel", auth, 200},
		{"wrong run bearer", "GET", "/v1/sessions", bearerOf(rb + "x"), 401},
		{"the credential itself", "GET", "/v1/sessions", bearerOf(l.Credential), 401},
		{"none", "GET", "/v1/sessions", nil, 401},
		{"unknown route", "GET", "/v1/nope", auth, 404},
		{"cannot mint links", "POST", "/v1/login-links", auth, 403},
		{"cannot revoke every page", "DELETE", "/v1/page-sessions", auth, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, b := credCall(t, e.ts.URL, tt.method, tt.path, "", tt.header); got != tt.want {
				t.Errorf("%s %s = %d %s; want %d", tt.method, tt.path, got, b, tt.want)
			}
		})
	}
	_, b := credCall(t, e.ts.URL, "POST", "/v1/login-links", "", auth)
	if !strings.Contains(b, CodeTokenRequired) || !strings.Contains(b, "cannot create login links") {
		t.Errorf("login link with a page credential = %s; want %s saying it cannot", b, CodeTokenRequired)
	}
}

func TestLogoutRevokes(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	la, lb := pageLogin(t, e), pageLogin(t, e)
	a, b := pageRunBearer(t, e.ts.URL, la), pageRunBearer(t, e.ts.URL, lb)
	// Without the Authorization header (a form post from another page),
	// logout is refused and revokes nothing.
	if st, _ := credCall(t, e.ts.URL, "POST", "/v1/logout", "", map[string]string{"Origin": e.ts.URL, "Cookie": oldSessionCookie(e.token)}); st != 401 {
		t.Errorf("logout without a credential = %d; want 401", st)
	}
	if st, _ := credCall(t, e.ts.URL, "POST", "/v1/logout", "", bearerOf(a)); st != 204 {
		t.Fatalf("logout = %d; want 204", st)
	}
	if st, _ := credCall(t, e.ts.URL, "GET", "/v1/sessions", "", bearerOf(a)); st != 401 {
		t.Errorf("after logout, the run bearer = %d; want 401", st)
	}
	if _, err := apitest.PageBearer(t.Context(), nil, e.ts.URL, la.ID, la.Credential); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("authenticate again after logout error = %v; want a 401", err)
	}
	if st, _ := credCall(t, e.ts.URL, "GET", "/v1/sessions", "", bearerOf(b)); st != 200 {
		t.Errorf("after another page's logout = %d; want 200", st)
	}
	if st, _, _ := e.send(t, apiCall{method: "POST", path: "/v1/logout"}); st != 400 {
		t.Errorf("logout with the token = %d; want 400 (the token is no page credential)", st)
	}
}

func TestPageSessionsListRevoke(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	a, b := pageLogin(t, e), pageLogin(t, e)
	list, err := e.client.PageSessions(t.Context())
	if err != nil || len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID || list[0].Current || list[1].Current {
		t.Fatalf("PageSessions() = %+v, %v; want a then b, neither current", list, err)
	}
	if !strings.HasPrefix(list[0].UserAgent, "Go-http-client") {
		t.Errorf("user agent = %q; want Go's", list[0].UserAgent)
	}
	rb := pageRunBearer(t, e.ts.URL, b)
	ra := pageRunBearer(t, e.ts.URL, a)
	st, body := credCall(t, e.ts.URL, "GET", "/v1/page-sessions", "", bearerOf(rb))
	var mine []PageSession
	if st != 200 || json.Unmarshal([]byte(body), &mine) != nil || len(mine) != 2 || mine[0].Current || !mine[1].Current {
		t.Errorf("page b lists %d %s; want b marked current", st, body)
	}
	if strings.Contains(body, a.Credential) || strings.Contains(body, b.Credential) || strings.Contains(body, rb) {
		t.Error("the listing holds a credential")
	}
	if err := e.client.RevokePageSession(t.Context(), b.ID); err != nil {
		t.Fatalf("RevokePageSession(b) error = %v", err)
	}
	if st, _ := credCall(t, e.ts.URL, "GET", "/v1/sessions", "", bearerOf(rb)); st != 401 {
		t.Errorf("run bearer of a revoked page = %d; want 401", st)
	}
	if err := e.client.RevokePageSession(t.Context(), b.ID); !IsCode(err, CodeNotFound) {
		t.Errorf("RevokePageSession(b) again error = %v; want %s", err, CodeNotFound)
	}
	if n, err := e.client.RevokePageSessions(t.Context()); err != nil || n != 1 {
		t.Errorf("RevokePageSessions() = %d, %v; want 1", n, err)
	}
	if st, _ := credCall(t, e.ts.URL, "GET", "/v1/sessions", "", bearerOf(ra)); st != 401 {
		t.Errorf("run bearer after revoking all = %d; want 401", st)
	}
}

func TestPageSessionsPersist(t *testing.T) {
	file := filepath.Join(t.TempDir(), "page-sessions.json")
	withFile := func(c *Config) { c.PageSessionsFile = file }
	e := newTestEnv(t, &fakePool{}, withFile)
	a, b := pageLogin(t, e), pageLogin(t, e)
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("Stat(%s) = %v, %v; want mode 0600", file, fi, err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []Login{a, b} {
		secret := strings.TrimPrefix(l.Credential, PageCredentialPrefix)
		if strings.Contains(string(raw), secret) || strings.Contains(string(raw), secret[:16]) || !strings.Contains(string(raw), hashCredential(l.Credential)) {
			t.Errorf("the file holds the credential, or not its hash:\n%s", raw)
		}
	}
	if err := e.client.RevokePageSession(t.Context(), a.ID); err != nil {
		t.Fatal(err)
	}
	// A new server on the same file: b is still logged in, a is not.
	e2 := newTestEnv(t, &fakePool{}, withFile)
	if st, _ := credCall(t, e2.ts.URL, "GET", "/v1/pool", "", bearerOf(pageRunBearer(t, e2.ts.URL, b))); st != 200 {
		t.Errorf("b after a restart = %d; want 200", st)
	}
	if _, err := apitest.PageBearer(t.Context(), nil, e2.ts.URL, a.ID, a.Credential); err == nil {
		t.Error("a (revoked) authenticated after a restart; want a 401")
	}
	// A file others may read or write is refused.
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Pool: &fakePool{}, Registry: e.reg, PageSessionsFile: file}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("New() with a 0644 page sessions file error = %v; want it refused", err)
	}
	// An unreadable document logs every page out, and the server starts.
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	e3 := newTestEnv(t, &fakePool{}, withFile)
	if _, err := apitest.PageBearer(t.Context(), nil, e3.ts.URL, b.ID, b.Credential); err == nil {
		t.Error("b authenticated after a garbled file; want a 401")
	}
}

func TestPageCredsBoundAndExpiry(t *testing.T) {
	p, err := loadPageCreds("", time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var first string
	for i := range maxPageCredentials + 3 {
		_, ps, err := p.create(now.Add(time.Duration(i)*time.Second), "ua")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ps.ID
		}
	}
	if n := len(p.list(now, "")); n != maxPageCredentials {
		t.Errorf("%d credentials live; want %d", n, maxPageCredentials)
	}
	if _, _, ok := p.key(now, first); ok {
		t.Error("the oldest credential survived the bound")
	}
	c, ps, err := p.create(now, "ua")
	if err != nil {
		t.Fatal(err)
	}
	if k, _, ok := p.key(now.Add(PageCredentialTTL-time.Second), ps.ID); !ok || hex.EncodeToString(k) != hashCredential(c) {
		t.Errorf("key(%s) before its expiry = %x, %v; want the credential's SHA-256", ps.ID, k, ok)
	}
	if !p.touch(now.Add(PageCredentialTTL-time.Second), ps.ID) {
		t.Error("credential refused before its expiry")
	}
	if _, _, ok := p.key(now.Add(PageCredentialTTL), ps.ID); ok {
		t.Error("credential accepted at its expiry")
	}
}

func TestPageServed(t *testing.T) {
	e := newTestEnv(t, &fakePool{}, nil)
	resp, err := http.Get(e.ts.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP = %q; want script-src 'self'", csp)
	}
	if strings.Contains(string(b), e.token) {
		t.Error("the page holds the token")
	}
	req, _ := http.NewRequest("GET", e.ts.URL+"/", nil)
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation = %d; want 304", resp2.StatusCode)
	}
	resp3, err := http.Get(e.ts.URL + "/assets/nope.js")
	if err != nil {
		t.Fatal(err)
	}
	resp3.Body.Close()
	if resp3.StatusCode != 404 {
		t.Errorf("missing asset = %d; want 404", resp3.StatusCode)
	}
}
