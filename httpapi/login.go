package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Browser login, with no ambient credential: browsers send cookies for a
// host to every port of it, where agents may listen, so the page holds no
// cookie. A client holding the token asks for a one-time login link
// (POST /v1/login-links): /login#code=CODE, the code in the fragment so
// that it reaches neither the server's logs nor a Referer. The login page's
// script redeems it (POST /v1/login) for a page credential, of which the
// page keeps only a non-extractable key, in IndexedDB (scoped to scheme,
// host and port), and with it authenticates by challenge for a run bearer
// of this daemon run (pageauth.go). Page credentials are listed, expire,
// and are revoked by logout or DELETE /v1/page-sessions/{id}; they cannot
// mint login links.

// Defaults of the login links.
const (
	// LoginLinkTTL is how long a login link can be used (once).
	LoginLinkTTL = 60 * time.Second
	// maxLoginCodes bounds the outstanding (unused, unexpired) codes.
	maxLoginCodes = 32
	// loginCodeBytes is the entropy of a login code.
	loginCodeBytes = 24
	// loginPath is the login page; the code follows in the fragment.
	loginPath = "/login#code="
)

// Error codes of the login endpoints.
const (
	// CodeCrossOrigin (403): a request from another origin (a WebSocket
	// upgrade, or a browser's request to a daemon without a token).
	CodeCrossOrigin = "cross_origin"
	// CodeLoginCode (401): a login code that was used, has expired or was
	// never issued.
	CodeLoginCode = "login_code"
	// CodeTokenRequired (403): the request needs the bearer token; a page
	// credential is not enough (it cannot mint login links).
	CodeTokenRequired = "token_required"
)

// LoginLink is the answer of POST /v1/login-links.
type LoginLink struct {
	// URL opens the page logged in; it works once, until ExpiresAt.
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// LoginRequest is the body of POST /v1/login.
type LoginRequest struct {
	Code string `json:"code"`
}

// Login is the answer of POST /v1/login: the page credential, whose
// SHA-256 is the key the page authenticates with (pageauth.go); it is no
// bearer token.
type Login struct {
	Credential string    `json:"credential"`
	ID         string    `json:"id"`
	ExpiresAt  time.Time `json:"expires_at"`
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

// errTokenRequired refuses a page credential where only the token will do.
var errTokenRequired = &Error{Status: http.StatusForbidden, Code: CodeTokenRequired,
	Message: "a page's login cannot create login links: use the token (agentpool open)"}

// createLoginLink: POST /v1/login-links → 201 with a LoginLink on the
// host the request was sent to (which passed the Host check). Only the
// token may ask: a page credential cannot beget others.
func (s *Server) createLoginLink(w http.ResponseWriter, r *http.Request) error {
	if principalOf(r).page != "" {
		return errTokenRequired
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	l, err := s.NewLoginLink(scheme + "://" + r.Host)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, l)
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
	return LoginLink{URL: strings.TrimSuffix(base, "/") + loginPath + code, ExpiresAt: now.Add(LoginLinkTTL)}, nil
}

// errLoginCode answers a login code that cannot be used.
var errLoginCode = &Error{Status: http.StatusUnauthorized, Code: CodeLoginCode,
	Message: "this login link was already used or has expired (each works once, for a minute): run 'agentpool open' for a new one"}

// login: POST /v1/login {"code"} consumes a login code and answers 201
// with a new page credential (a Login).
func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	var req LoginRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	now := time.Now()
	if req.Code == "" || !s.logins.use(now, req.Code) {
		return errLoginCode
	}
	cred, ps, err := s.pages.create(now, r.UserAgent())
	if err != nil {
		return err
	}
	s.log.Info("page logged in", "page", ps.ID)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, Login{Credential: cred, ID: ps.ID, ExpiresAt: ps.ExpiresAt})
	return nil
}

// logout: POST /v1/logout revokes the page credential whose run bearer
// sent it, and its run bearers, at once. It needs the run bearer in the
// Authorization header, which no other origin's page can send.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	id := principalOf(r).page
	if id == "" {
		return badRequest("Authorization", "logout revokes the page credential that sends it; the token is not one (see DELETE /v1/page-sessions/{id})")
	}
	s.pageAuths.forget(id)
	if _, err := s.pages.revoke(id); err != nil {
		return err
	}
	s.log.Info("page logged out", "page", id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pageSessions: GET /v1/page-sessions → the live page credentials
// ([]PageSession); the caller's own, if it is one, is marked current.
func (s *Server) pageSessions(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, s.pages.list(time.Now(), principalOf(r).page))
	return nil
}

// revokePageSession: DELETE /v1/page-sessions/{id} revokes one page
// credential at once (204; 404 if there is none by that id).
func (s *Server) revokePageSession(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if id != "" {
		s.pageAuths.forget(id)
	}
	n, err := s.pages.revoke(id)
	if err != nil {
		return err
	}
	if n == 0 {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("no page session %q", id)}
	}
	s.log.Info("page session revoked", "page", id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// revokePageSessions: DELETE /v1/page-sessions revokes every page
// credential; only the token may (a page logs itself out with logout).
func (s *Server) revokePageSessions(w http.ResponseWriter, r *http.Request) error {
	if principalOf(r).page != "" {
		return errTokenRequired
	}
	s.pageAuths.forget("")
	n, err := s.pages.revoke("")
	if err != nil {
		return err
	}
	s.log.Info("every page session revoked", "count", n)
	writeJSON(w, http.StatusOK, struct {
		Revoked int `json:"revoked"`
	}{n})
	return nil
}

// principal is who a request authenticated as: the token (page "") or a
// page credential (page = its id); or, host set, another host of the
// cluster that forwarded the request of a user it authenticated.
type principal struct{ page, host string }

// principalKey is the context key of a request's principal.
type principalKey struct{}

// principalOf returns the principal route's adapter found for r.
func principalOf(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

// errUnauthorized answers a request with neither the token nor a live
// run bearer of a page.
var errUnauthorized = &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "missing or wrong bearer token"}

// errPageCredentialBearer refuses a page credential sent as a bearer
// token, which it no longer is (pageauth.go).
var errPageCredentialBearer = &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
	Message: "a page credential is not a bearer token: the page authenticates with a challenge (POST /v1/page-auth/challenge); reload the page"}

// authenticate admits a request to a route that is not public: the bearer
// token, a live page's run bearer (pageauth.go) in the Authorization
// header, the user token of another host of the cluster, or the signature
// of a request another host forwarded, which ServeHTTP checked (a request
// that claims to come from a host without that proof is refused whatever
// else it bears). Nothing a browser sends by itself (a cookie) counts, and
// neither does a page credential itself. Without a configured token every
// request passes, but a browser's request from another origin is refused.
func (s *Server) authenticate(r *http.Request) (principal, error) {
	if hostClaim(r) {
		if host := provenHost(r); host != "" {
			return principal{host: host}, nil
		}
		return principal{}, hostRefused("a request claiming to come from another host needs that host's signature, checked before it reaches here")
	}
	b := bearer(r)
	if strings.HasPrefix(b, PageCredentialPrefix) {
		return principal{}, errPageCredentialBearer
	}
	if strings.HasPrefix(b, RunBearerPrefix) {
		now := time.Now()
		if id, ok := s.pageAuths.bearer(now, b); ok && s.pages.touch(now, id) {
			return principal{page: id}, nil
		}
		if s.cfg.Token != "" {
			return principal{}, errUnauthorized
		}
	}
	if s.cfg.Token == "" {
		if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" {
			return principal{}, sameOrigin(r)
		}
		return principal{}, nil
	}
	if tokenEqual(b, s.cfg.Token) || s.knownToken(b) {
		return principal{}, nil
	}
	return principal{}, errUnauthorized
}

// errCrossOrigin refuses a browser's request from another origin.
var errCrossOrigin = &Error{Status: http.StatusForbidden, Code: CodeCrossOrigin,
	Message: "cross-origin request refused: it must come from the agentpool page itself"}

// sameOrigin is the CSRF check of a daemon without a token: safe methods
// pass; others must say, by Sec-Fetch-Site or by an Origin equal to the
// request's own scheme and Host, that they come from the page itself.
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
	if !originMatches(r) {
		return errCrossOrigin
	}
	return nil
}

// originMatches says whether r's Origin is its own scheme and Host.
func originMatches(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	return origin != "" && strings.EqualFold(origin, scheme+r.Host)
}

// LoginLink asks the daemon for a one-time login link to its page
// (POST /v1/login-links).
func (c *Client) LoginLink(ctx context.Context) (LoginLink, error) {
	var l LoginLink
	err := c.call(ctx, http.MethodPost, "/v1/login-links", nil, &l)
	return l, err
}

// PageSessions lists the pages logged in (GET /v1/page-sessions).
func (c *Client) PageSessions(ctx context.Context) ([]PageSession, error) {
	var l []PageSession
	err := c.call(ctx, http.MethodGet, "/v1/page-sessions", nil, &l)
	return l, err
}

// RevokePageSession logs out the page with this id
// (DELETE /v1/page-sessions/{id}).
func (c *Client) RevokePageSession(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/page-sessions/"+url.PathEscape(id), nil, nil)
}

// RevokePageSessions logs out every page (DELETE /v1/page-sessions) and
// returns how many there were.
func (c *Client) RevokePageSessions(ctx context.Context) (int, error) {
	var out struct {
		Revoked int `json:"revoked"`
	}
	err := c.call(ctx, http.MethodDelete, "/v1/page-sessions", nil, &out)
	return out.Revoked, err
}
