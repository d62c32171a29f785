package httpapi

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Page authentication by challenge. A page credential is no bearer token:
// whoever binds the daemon's port while it is stopped would collect it
// from the page's reconnects, and could serve the origin a script that
// reads the origin's storage. Instead the page keeps K = SHA-256(credential)
// (what the daemon keeps too) as a non-extractable WebCrypto HMAC key, and
// at each start of the page, or of a daemon run:
//
//  1. POST /v1/page-auth/challenge {id, nonce}: the daemon proves it knows
//     K (a MAC of the page's fresh nonce), which an impostor cannot, and
//     hands a single-use challenge; the page checks the proof before it
//     sends anything else.
//  2. POST /v1/page-auth {id, challenge, mac}: the page proves it holds K
//     and gets a run bearer ("apr_…"), kept in the daemon's memory only:
//     it dies with this daemon run, when its page session is revoked or
//     expires, and after RunBearerTTL.
//
// So nothing the page sends or stores is worth anything to a later run
// of the daemon.

// Defaults and bounds of page authentication.
const (
	// PageChallengeTTL is how long a challenge can be answered (once).
	PageChallengeTTL = 60 * time.Second
	// RunBearerTTL bounds a run bearer's life; the page then
	// authenticates again, transparently.
	RunBearerTTL = 12 * time.Hour
	// RunBearerPrefix begins every run bearer.
	RunBearerPrefix = "apr_"
	// maxPageChallenges bounds the outstanding challenges; past it the
	// oldest goes.
	maxPageChallenges = 1024
	// maxRunBearers bounds the live run bearers; past it the oldest goes.
	maxRunBearers = 1024
	// pageNonceBytes is the length of the page's nonce and of a challenge.
	pageNonceBytes = 32
	// runBearerBytes is the entropy of a run bearer.
	runBearerBytes = 32
	// pageHelloLabel and pageAuthLabel begin the MACed messages of the
	// daemon's proof and of the page's answer (so one is never the other).
	pageHelloLabel = "agentpool page hello v1\x00"
	pageAuthLabel  = "agentpool page auth v1\x00"
)

// PageChallengeRequest is the body of POST /v1/page-auth/challenge: the
// page's id and a fresh nonce (hex of 32 random bytes).
type PageChallengeRequest struct {
	ID    string `json:"id"`
	Nonce string `json:"nonce"`
}

// PageChallenge is the answer of POST /v1/page-auth/challenge: Proof is
// hex(HMAC-SHA256(K, pageHelloMessage(nonce, id))), Challenge hex of 32
// random bytes to answer within PageChallengeTTL.
type PageChallenge struct {
	Proof     string `json:"proof"`
	Challenge string `json:"challenge"`
}

// PageAuthRequest is the body of POST /v1/page-auth: MAC is
// hex(HMAC-SHA256(K, pageAuthMessage(challenge, id))).
type PageAuthRequest struct {
	ID        string `json:"id"`
	Challenge string `json:"challenge"`
	MAC       string `json:"mac"`
}

// PageAuth is the answer of POST /v1/page-auth: a run bearer, to send as
// "Authorization: Bearer <bearer>" until ExpiresAt or a 401.
type PageAuth struct {
	Bearer    string    `json:"bearer"`
	ExpiresAt time.Time `json:"expires_at"`
}

// pageHelloMessage is what the daemon's proof MACs.
func pageHelloMessage(nonce, id string) []byte {
	return []byte(pageHelloLabel + nonce + "\x00" + id)
}

// pageAuthMessage is what the page's answer to a challenge MACs.
func pageAuthMessage(challenge, id string) []byte {
	return []byte(pageAuthLabel + challenge + "\x00" + id)
}

// pageMAC is hex(HMAC-SHA256(key, msg)).
func pageMAC(key, msg []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return hex.EncodeToString(m.Sum(nil))
}

// pageGrant is an outstanding challenge or a live run bearer: the page
// it is for, until when.
type pageGrant struct {
	page    string
	expires time.Time
}

func (g pageGrant) expiry() time.Time { return g.expires }

// pageAuths holds the outstanding challenges and the run bearers, in
// memory only. The zero value is ready to use.
type pageAuths struct {
	mu         sync.Mutex
	challenges map[string]pageGrant            // challenge (hex) → its page
	bearers    map[[sha256.Size]byte]pageGrant // hash of the bearer → its page
}

// challenge makes a new challenge for page, valid until now+ttl.
func (a *pageAuths) challenge(now time.Time, page string, ttl time.Duration) (string, error) {
	b := make([]byte, pageNonceBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("page challenge: %w", err)
	}
	c := hex.EncodeToString(b)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.challenges == nil {
		a.challenges = map[string]pageGrant{}
	}
	makeRoom(a.challenges, now, maxPageChallenges)
	a.challenges[c] = pageGrant{page: page, expires: now.Add(ttl)}
	return c, nil
}

// useChallenge consumes c: it returns its page if c was outstanding and
// unexpired.
func (a *pageAuths) useChallenge(now time.Time, c string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.challenges[c]
	if !ok {
		return "", false
	}
	delete(a.challenges, c)
	return v.page, now.Before(v.expires)
}

// issue makes a new run bearer for page, valid until expires.
func (a *pageAuths) issue(now time.Time, page string, expires time.Time) (string, error) {
	b := make([]byte, runBearerBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("run bearer: %w", err)
	}
	tok := RunBearerPrefix + base64.RawURLEncoding.EncodeToString(b)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bearers == nil {
		a.bearers = map[[sha256.Size]byte]pageGrant{}
	}
	makeRoom(a.bearers, now, maxRunBearers)
	a.bearers[sha256.Sum256([]byte(tok))] = pageGrant{page: page, expires: expires}
	return tok, nil
}

// bearer returns the page of a live run bearer.
func (a *pageAuths) bearer(now time.Time, tok string) (string, bool) {
	h := sha256.Sum256([]byte(tok))
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.bearers[h]
	if !ok {
		return "", false
	}
	if !now.Before(v.expires) {
		delete(a.bearers, h)
		return "", false
	}
	return v.page, true
}

// forget drops the run bearers of page ("" = every page).
func (a *pageAuths) forget(page string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, v := range a.bearers {
		if page == "" || v.page == page {
			delete(a.bearers, k)
		}
	}
}

// errPageAuth answers a challenge or an answer that cannot be used: an
// unknown, expired or revoked page, a used or expired challenge, a wrong
// MAC. It looks like every other 401.
var errPageAuth = &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
	Message: "this page is not logged in (or its login was revoked or has expired): run 'agentpool open' for a login link"}

// validHex says whether s is the lowercase hex of n bytes.
func validHex(s string, n int) bool {
	if len(s) != 2*n {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// pageAuthChallenge: POST /v1/page-auth/challenge {"id","nonce"} → 200
// with a PageChallenge, or 401 for a page that is not logged in.
func (s *Server) pageAuthChallenge(w http.ResponseWriter, r *http.Request) error {
	var req PageChallengeRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if !validHex(req.Nonce, pageNonceBytes) {
		return badRequest("nonce", "want the lowercase hex of 32 random bytes")
	}
	now := time.Now()
	key, _, ok := s.pages.key(now, req.ID)
	if !ok {
		return errPageAuth
	}
	c, err := s.pageAuths.challenge(now, req.ID, PageChallengeTTL)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, PageChallenge{Proof: pageMAC(key, pageHelloMessage(req.Nonce, req.ID)), Challenge: c})
	return nil
}

// pageAuthenticate: POST /v1/page-auth {"id","challenge","mac"} consumes
// the challenge and answers 200 with a PageAuth if the MAC is right, else
// 401.
func (s *Server) pageAuthenticate(w http.ResponseWriter, r *http.Request) error {
	var req PageAuthRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	now := time.Now()
	page, ok := s.pageAuths.useChallenge(now, req.Challenge)
	if !ok || page != req.ID {
		return errPageAuth
	}
	key, expires, ok := s.pages.key(now, req.ID)
	if !ok {
		return errPageAuth
	}
	want := pageMAC(key, pageAuthMessage(req.Challenge, req.ID))
	if !hmac.Equal([]byte(want), []byte(req.MAC)) {
		s.log.Info("page authentication refused: wrong MAC", "page", req.ID)
		return errPageAuth
	}
	if limit := now.Add(RunBearerTTL); limit.Before(expires) {
		expires = limit
	}
	tok, err := s.pageAuths.issue(now, req.ID, expires)
	if err != nil {
		return err
	}
	s.pages.touch(now, req.ID)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, PageAuth{Bearer: tok, ExpiresAt: expires})
	return nil
}
