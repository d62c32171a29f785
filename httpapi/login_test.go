package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// noRedirect is a client that returns redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

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

// loginCookie opens link and returns the session cookie it sets.
func loginCookie(t *testing.T, link string) *http.Cookie {
	t.Helper()
	resp, err := noRedirect.Get(link)
	if err != nil {
		t.Fatalf("GET %s: %v", link, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("GET login link = %d to %q; want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, c := range resp.Cookies() {
		if c.Name == SessionCookieName {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
				t.Errorf("cookie = %+v; want HttpOnly, SameSite=Strict, Path=/", c)
			}
			return c
		}
	}
	t.Fatalf("login link set no %s cookie", SessionCookieName)
	return nil
}

func TestLoginLinkOnce(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	l := newLoginLink(t, e)
	u, err := url.Parse(l.URL)
	if err != nil || u.Path != "/login" || u.Query().Get("code") == "" || !strings.HasPrefix(l.URL, e.ts.URL) {
		t.Fatalf("login link = %q; want %s/login?code=...", l.URL, e.ts.URL)
	}
	if d := time.Until(l.ExpiresAt); d <= 0 || d > LoginLinkTTL {
		t.Errorf("expires in %v; want within %v", d, LoginLinkTTL)
	}
	if strings.Contains(l.URL, e.token) {
		t.Errorf("login link %q holds the token", l.URL)
	}
	if resp, err := noRedirect.Head(l.URL); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD login link = %v, %v; want 200, the link kept", resp, err)
	}
	c := loginCookie(t, l.URL)
	if strings.Contains(c.Value, e.token) {
		t.Errorf("cookie %q holds the token", c.Value)
	}
	// A second use fails, and says what to do.
	resp, err := noRedirect.Get(l.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), "agentpool open") || len(resp.Cookies()) != 0 {
		t.Errorf("second use = %d %q, cookies %v; want 401 naming agentpool open, no cookie", resp.StatusCode, b, resp.Cookies())
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

// cookieCall sends a request with the session cookie and the given headers.
func cookieCall(t *testing.T, e *testEnv, c *http.Cookie, method, path, body string, header map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if c != nil {
		req.AddCookie(c)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestCookieAuthAndOrigin(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	c := loginCookie(t, newLoginLink(t, e).URL)
	origin := e.ts.URL
	tests := []struct {
		name   string
		cookie *http.Cookie
		method string
		path   string
		header map[string]string
		want   int
	}{
		{"get with cookie", c, "GET", "/v1/sessions", nil, 200},
		{"get without", nil, "GET", "/v1/sessions", nil, 401},
		{"forged cookie", &http.Cookie{Name: SessionCookieName, Value: c.Value[:len(c.Value)-2] + "xx"}, "GET", "/v1/sessions", nil, 401},
		{"post same origin", c, "POST", "/v1/sessions/s1/cancel", map[string]string{"Origin": origin}, 200},
		{"post fetch metadata", c, "POST", "/v1/sessions/s1/cancel", map[string]string{"Sec-Fetch-Site": "same-origin"}, 200},
		{"post cross site", c, "POST", "/v1/sessions/s1/cancel", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 403},
		{"post other origin", c, "POST", "/v1/sessions/s1/cancel", map[string]string{"Origin": "http://localhost:1"}, 403},
		{"post no origin", c, "POST", "/v1/sessions/s1/cancel", nil, 403},
		{"delete cross site", c, "DELETE", "/v1/sessions/s1", map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
		{"bearer needs no origin", nil, "POST", "/v1/sessions/s1/cancel", map[string]string{"Authorization": "Bearer " + e.token}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cookieCall(t, e, tt.cookie, tt.method, tt.path, "", tt.header); got != tt.want {
				t.Errorf("%s %s = %d; want %d", tt.method, tt.path, got, tt.want)
			}
		})
	}
}

func TestCookieExpiry(t *testing.T) {
	s := &Server{cfg: Config{Token: "k"}}
	now := time.Now()
	v, err := s.newSessionCookie(now)
	if err != nil {
		t.Fatal(err)
	}
	if !s.cookieValid(v, now.Add(SessionCookieTTL-time.Minute)) {
		t.Error("cookie invalid before its expiry")
	}
	if s.cookieValid(v, now.Add(SessionCookieTTL+time.Second)) {
		t.Error("cookie valid after its expiry")
	}
	other := &Server{cfg: Config{Token: "other"}}
	if other.cookieValid(v, now) {
		t.Error("cookie valid under another token")
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
