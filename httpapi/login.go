package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Browser login: a client holding the token asks for a one-time login
// link (POST /v1/login-links); opening it (GET /login?code=...) consumes
// the code and sets a session cookie, then redirects to the page. The
// cookie is HttpOnly and SameSite=Strict; state-changing requests it
// authenticates must also pass a same-origin check (Sec-Fetch-Site or
// Origin), on top of the Host check every request passes.

// Defaults of the login links and the session cookie.
const (
	// LoginLinkTTL is how long a login link can be used (once).
	LoginLinkTTL = 60 * time.Second
	// SessionCookieTTL is how long a browser stays logged in.
	SessionCookieTTL = 7 * 24 * time.Hour
	// SessionCookieName is the name of the session cookie.
	SessionCookieName = "agentpool_session"
	// maxLoginCodes bounds the outstanding (unused, unexpired) codes.
	maxLoginCodes = 32
	// loginCodeBytes is the entropy of a login code.
	loginCodeBytes = 24
	// cookieVersion prefixes the session cookie's value.
	cookieVersion = "v1"
)

// CodeCrossOrigin is the error code (403) of a state-changing request
// authenticated by the session cookie that does not come from the page's
// own origin.
const CodeCrossOrigin = "cross_origin"

// LoginLink is the answer of POST /v1/login-links.
type LoginLink struct {
	// URL opens the page logged in; it works once, until ExpiresAt.
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// loginCodes holds the outstanding one-time login codes, by hash. The
// zero value is ready to use.
type loginCodes struct {
	mu    sync.Mutex
	codes map[[sha256.Size]byte]time.Time // hash of the code → expiry
}

// add makes a new code valid until now+ttl, dropping expired codes and,
// past maxLoginCodes, the one that expires first.
func (l *loginCodes) add(now time.Time, ttl time.Duration) (string, error) {
	b := make([]byte, loginCodeBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("login code: %w", err)
	}
	code := base64.RawURLEncoding.EncodeToString(b)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.codes == nil {
		l.codes = map[[sha256.Size]byte]time.Time{}
	}
	var oldest [sha256.Size]byte
	var oldestAt time.Time
	for h, exp := range l.codes {
		if !now.Before(exp) {
			delete(l.codes, h)
			continue
		}
		if oldestAt.IsZero() || exp.Before(oldestAt) {
			oldest, oldestAt = h, exp
		}
	}
	if len(l.codes) >= maxLoginCodes {
		delete(l.codes, oldest)
	}
	l.codes[sha256.Sum256([]byte(code))] = now.Add(ttl)
	return code, nil
}

// use consumes code: true once, if it is known and not expired.
func (l *loginCodes) use(now time.Time, code string) bool {
	h := sha256.Sum256([]byte(code))
	l.mu.Lock()
	defer l.mu.Unlock()
	exp, ok := l.codes[h]
	if !ok {
		return false
	}
	delete(l.codes, h)
	return now.Before(exp)
}

// createLoginLink: POST /v1/login-links → 201 with a LoginLink on the
// host the request was sent to (which passed the Host check).
func (s *Server) createLoginLink(w http.ResponseWriter, r *http.Request) error {
	now := time.Now()
	code, err := s.logins.add(now, LoginLinkTTL)
	if err != nil {
		return err
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	writeJSON(w, http.StatusCreated, LoginLink{URL: scheme + "://" + r.Host + "/login?code=" + code, ExpiresAt: now.Add(LoginLinkTTL)})
	return nil
}

// NewLoginLink returns a one-time login link on base (such as
// "http://127.0.0.1:7420"), for the daemon's own banner.
func (s *Server) NewLoginLink(base string) (LoginLink, error) {
	now := time.Now()
	code, err := s.logins.add(now, LoginLinkTTL)
	if err != nil {
		return LoginLink{}, err
	}
	return LoginLink{URL: strings.TrimSuffix(base, "/") + "/login?code=" + code, ExpiresAt: now.Add(LoginLinkTTL)}, nil
}

// login: GET /login?code=... consumes a login code, sets the session
// cookie and redirects to the page, so the code leaves the address bar.
// A used, expired or unknown code gets a page that says what to do.
func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if r.Method == http.MethodHead {
		// A link preview's HEAD must not use up the link.
		w.WriteHeader(http.StatusOK)
		return nil
	}
	if !s.logins.use(time.Now(), r.URL.Query().Get("code")) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(loginFailedPage))
		return nil
	}
	value, err := s.newSessionCookie(time.Now())
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookieName, Value: value, Path: "/", MaxAge: int(SessionCookieTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
	return nil
}

// logout: POST /v1/logout clears the browser's session cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	http.SetCookie(w, &http.Cookie{Name: SessionCookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// loginFailedPage answers a login link that cannot be used.
const loginFailedPage = `<!doctype html><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>agentpool: login link used or expired</title>
<body style="font:16px/1.5 system-ui,sans-serif;max-width:36em;margin:3em auto;padding:0 1em">
<h1 style="font-size:1.3em">This login link was already used or has expired</h1>
<p>Each link works once, for one minute. Get a new one in a terminal:</p>
<pre style="background:#8882;padding:.6em 1em;border-radius:6px">agentpool open</pre>
</body>`

// newSessionCookie returns a session cookie's value valid from now:
// v1.<expiry unix>.<nonce>.<mac>, the MAC an HMAC-SHA256 keyed by the API
// token. It needs no server state, survives a restart of the daemon, and
// stops working when the token changes.
func (s *Server) newSessionCookie(now time.Time) (string, error) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("session cookie: %w", err)
	}
	body := cookieVersion + "." + strconv.FormatInt(now.Add(SessionCookieTTL).Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString(nonce)
	return body + "." + s.cookieMAC(body), nil
}

// cookieMAC is the MAC of a session cookie's body.
func (s *Server) cookieMAC(body string) string {
	m := hmac.New(sha256.New, s.cookieKey())
	m.Write([]byte(body))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// cookieKey derives the cookie MAC key from the token; without a token
// (loopback only, every request authorized) a per-server random key.
func (s *Server) cookieKey() []byte {
	if s.cfg.Token != "" {
		k := sha256.Sum256([]byte("agentpool session cookie\x00" + s.cfg.Token))
		return k[:]
	}
	s.keyOnce.Do(func() {
		s.key = make([]byte, 32)
		_, _ = rand.Read(s.key)
	})
	return s.key
}

// cookieAuthorized says whether r carries a valid, unexpired session cookie.
func (s *Server) cookieAuthorized(r *http.Request) bool {
	c, err := r.Cookie(SessionCookieName)
	if err != nil {
		return false
	}
	return s.cookieValid(c.Value, time.Now())
}

// cookieValid checks a session cookie's value at now.
func (s *Server) cookieValid(v string, now time.Time) bool {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return false
	}
	body, mac := v[:i], v[i+1:]
	if !hmac.Equal([]byte(mac), []byte(s.cookieMAC(body))) {
		return false
	}
	parts := strings.Split(body, ".")
	if len(parts) != 3 || parts[0] != cookieVersion {
		return false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	return err == nil && now.Unix() < exp
}

// errCrossOrigin refuses a cookie-authenticated request from elsewhere.
var errCrossOrigin = &Error{Status: http.StatusForbidden, Code: CodeCrossOrigin,
	Message: "cross-origin request refused: a request authenticated by the session cookie must come from the agentpool page itself"}

// sameOrigin is the CSRF check of a request authenticated by the session
// cookie: safe methods pass; others must say, by Sec-Fetch-Site or by an
// Origin equal to the request's own scheme and Host, that they come from
// the page itself. A request that says neither is refused too (every
// browser the page supports sends at least one).
func sameOrigin(r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		if site == "same-origin" {
			return nil
		}
		return errCrossOrigin
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return errCrossOrigin
	}
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	if !strings.EqualFold(origin, scheme+r.Host) {
		return errCrossOrigin
	}
	return nil
}

// errUnauthorized answers a request with neither the token nor a cookie.
var errUnauthorized = &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "missing or wrong bearer token"}

// authenticate admits a request to a route that is not public: the bearer
// token as is; the session cookie only from the page's own origin (for
// state-changing methods). Without a configured token, browsers' requests
// from another origin are refused all the same.
func (s *Server) authenticate(r *http.Request) error {
	if s.cfg.Token == "" {
		if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" {
			return sameOrigin(r)
		}
		return nil
	}
	if s.bearerAuthorized(r) {
		return nil
	}
	if s.cookieAuthorized(r) {
		return sameOrigin(r)
	}
	return errUnauthorized
}

// LoginLink asks the daemon for a one-time login link to its page
// (POST /v1/login-links).
func (c *Client) LoginLink(ctx context.Context) (LoginLink, error) {
	var l LoginLink
	err := c.call(ctx, http.MethodPost, "/v1/login-links", nil, &l)
	return l, err
}
