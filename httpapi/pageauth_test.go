package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/httpapi/apitest"
)

// jsonHeader is the header of a JSON body.
var jsonHeader = map[string]string{"Content-Type": "application/json"}

// testMAC is hex(HMAC-SHA256(SHA-256(cred), msg)), computed apart from the
// server's code.
func testMAC(cred, msg string) string {
	k := sha256.Sum256([]byte(cred))
	m := hmac.New(sha256.New, k[:])
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// askChallenge posts a challenge request and decodes a 200 answer.
func askChallenge(t *testing.T, base, id, nonce string) (int, PageChallenge, string) {
	t.Helper()
	body, _ := json.Marshal(PageChallengeRequest{ID: id, Nonce: nonce})
	st, b := credCall(t, base, "POST", "/v1/page-auth/challenge", string(body), jsonHeader)
	var c PageChallenge
	if st == 200 {
		if err := json.Unmarshal([]byte(b), &c); err != nil {
			t.Fatalf("challenge answer %s: %v", b, err)
		}
	}
	return st, c, b
}

// answerChallenge posts an answer to a challenge and decodes a 200 answer.
func answerChallenge(t *testing.T, base, id, challenge, mac string) (int, PageAuth, string) {
	t.Helper()
	body, _ := json.Marshal(PageAuthRequest{ID: id, Challenge: challenge, MAC: mac})
	st, b := credCall(t, base, "POST", "/v1/page-auth", string(body), jsonHeader)
	var a PageAuth
	if st == 200 {
		if err := json.Unmarshal([]byte(b), &a); err != nil {
			t.Fatalf("page-auth answer %s: %v", b, err)
		}
	}
	return st, a, b
}

const testNonce = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

func TestPageAuthChallenge(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	l := pageLogin(t, e)

	// The daemon proves it knows the page's key, for the page's nonce.
	st, c, b := askChallenge(t, e.ts.URL, l.ID, testNonce)
	if st != 200 || c.Proof != testMAC(l.Credential, "agentpool page hello v1\x00"+testNonce+"\x00"+l.ID) || len(c.Challenge) != 64 {
		t.Fatalf("challenge = %d %s; want 200 with the proof of the key and a 32-byte challenge", st, b)
	}
	if strings.Contains(b, l.Credential) || strings.Contains(b, hashCredential(l.Credential)) {
		t.Errorf("the challenge's answer holds the credential or its key: %s", b)
	}
	// A right answer gets a run bearer, which works; the challenge is
	// single-use.
	mac := testMAC(l.Credential, "agentpool page auth v1\x00"+c.Challenge+"\x00"+l.ID)
	st, a, b := answerChallenge(t, e.ts.URL, l.ID, c.Challenge, mac)
	if st != 200 || !strings.HasPrefix(a.Bearer, RunBearerPrefix) || a.ExpiresAt.After(time.Now().Add(RunBearerTTL)) || !a.ExpiresAt.After(time.Now()) {
		t.Fatalf("page-auth = %d %s; want 200 with an %s run bearer expiring within %v", st, b, RunBearerPrefix, RunBearerTTL)
	}
	if st, b := credCall(t, e.ts.URL, "GET", "/v1/sessions", "", bearerOf(a.Bearer)); st != 200 {
		t.Errorf("GET /v1/sessions with the run bearer = %d %s; want 200", st, b)
	}
	if st, _, _ := answerChallenge(t, e.ts.URL, l.ID, c.Challenge, mac); st != 401 {
		t.Errorf("the same challenge answered again = %d; want 401", st)
	}

	// Refusals, each a 401 shaped as every other.
	_, c2, _ := askChallenge(t, e.ts.URL, l.ID, testNonce)
	_, c3, _ := askChallenge(t, e.ts.URL, l.ID, testNonce)
	other := pageLogin(t, e)
	tests := []struct {
		name, id, challenge, mac string
	}{
		{"wrong mac", l.ID, c2.Challenge, testMAC(l.Credential+"x", "agentpool page auth v1\x00"+c2.Challenge+"\x00"+l.ID)},
		{"wrong mac consumed the challenge", l.ID, c2.Challenge, testMAC(l.Credential, "agentpool page auth v1\x00"+c2.Challenge+"\x00"+l.ID)},
		{"another page's id", other.ID, c3.Challenge, testMAC(other.Credential, "agentpool page auth v1\x00"+c3.Challenge+"\x00"+other.ID)},
		{"the proof as the answer", l.ID, c3.Challenge, c.Proof},
		{"unknown challenge", l.ID, strings.Repeat("ab", 32), testMAC(l.Credential, "agentpool page auth v1\x00"+strings.Repeat("ab", 32)+"\x00"+l.ID)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _, b := answerChallenge(t, e.ts.URL, tt.id, tt.challenge, tt.mac)
			if st != 401 || !strings.Contains(b, `"code":"`+CodeUnauthorized+`"`) {
				t.Errorf("page-auth = %d %s; want 401 %s", st, b, CodeUnauthorized)
			}
		})
	}
	for _, id := range []string{"pg-000000000000", "", other.ID + "x"} {
		if st, _, b := askChallenge(t, e.ts.URL, id, testNonce); st != 401 || !strings.Contains(b, `"code":"`+CodeUnauthorized+`"`) || !strings.Contains(b, "agentpool open") {
			t.Errorf("challenge for id %q = %d %s; want 401 %s naming agentpool open", id, st, b, CodeUnauthorized)
		}
	}
	for _, nonce := range []string{"", "00", strings.ToUpper(testNonce), testNonce + "00"} {
		if st, _, _ := askChallenge(t, e.ts.URL, l.ID, nonce); st != 400 {
			t.Errorf("challenge with nonce %q = %d; want 400", nonce, st)
		}
	}

	// The page credential itself is no bearer token any more.
	st, b = credCall(t, e.ts.URL, "GET", "/v1/sessions", "", bearerOf(l.Credential))
	if st != 401 || !strings.Contains(b, "challenge") || !strings.Contains(b, "reload the page") {
		t.Errorf("GET /v1/sessions with the page credential = %d %s; want 401 saying the page authenticates by challenge", st, b)
	}
}

func TestPageChallengeExpires(t *testing.T) {
	var a pageAuths
	now := time.Now()
	c, err := a.challenge(now, "pg-1", PageChallengeTTL)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.useChallenge(now.Add(PageChallengeTTL), c); ok {
		t.Error("useChallenge at its expiry = true; want false")
	}
	c, _ = a.challenge(now, "pg-1", PageChallengeTTL)
	if page, ok := a.useChallenge(now.Add(PageChallengeTTL-time.Second), c); !ok || page != "pg-1" {
		t.Errorf("useChallenge before its expiry = %q, %v; want pg-1", page, ok)
	}
	for range maxPageChallenges + 5 {
		if _, err := a.challenge(now, "pg-1", PageChallengeTTL); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.challenges) > maxPageChallenges {
		t.Errorf("%d challenges kept; want at most %d", len(a.challenges), maxPageChallenges)
	}
	tok, err := a.issue(now, "pg-1", now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.bearer(now.Add(time.Hour), tok); ok {
		t.Error("run bearer accepted at its expiry")
	}
}

// A run bearer lives in the daemon's memory only: a new server over the
// same page sessions file (a restart) refuses it, while the page
// authenticates again with its key, no new login needed. Revoking the
// page kills its run bearers.
func TestRunBearerRestartRevoke(t *testing.T) {
	file := filepath.Join(t.TempDir(), "page-sessions.json")
	withFile := func(c *Config) { c.PageSessionsFile = file }
	e := newTestEnv(t, &fakePool{}, withFile)
	l := pageLogin(t, e)
	old := pageRunBearer(t, e.ts.URL, l)
	old2 := pageRunBearer(t, e.ts.URL, l)
	e.ts.Close()

	e2 := newTestEnv(t, &fakePool{}, withFile)
	if st, _ := credCall(t, e2.ts.URL, "GET", "/v1/pool", "", bearerOf(old)); st != 401 {
		t.Errorf("the last run's run bearer after a restart = %d; want 401", st)
	}
	rb := pageRunBearer(t, e2.ts.URL, l)
	rb2 := pageRunBearer(t, e2.ts.URL, l)
	if st, _ := credCall(t, e2.ts.URL, "GET", "/v1/pool", "", bearerOf(rb)); st != 200 {
		t.Errorf("a new run bearer after a restart = %d; want 200", st)
	}
	st, body := credCall(t, e2.ts.URL, "GET", "/v1/page-sessions", "", bearerOf(rb))
	var list []PageSession
	if st != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list) != 1 || !list[0].Current {
		t.Errorf("page sessions with a run bearer = %d %s; want this page, current", st, body)
	}
	if strings.Contains(body, old2) || strings.Contains(body, rb) {
		t.Errorf("the listing holds a run bearer: %s", body)
	}
	if err := e2.client.RevokePageSession(t.Context(), l.ID); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{rb, rb2} {
		if st, _ := credCall(t, e2.ts.URL, "GET", "/v1/pool", "", bearerOf(b)); st != 401 {
			t.Errorf("a run bearer of a revoked page = %d; want 401", st)
		}
	}
	if _, err := apitest.PageBearer(t.Context(), nil, e2.ts.URL, l.ID, l.Credential); err == nil {
		t.Error("a revoked page authenticated again")
	}
}

// The file of earlier versions held credentials that pages kept in
// localStorage; they are dropped, not carried over.
func TestPageSessionsV1Dropped(t *testing.T) {
	file := filepath.Join(t.TempDir(), "page-sessions.json")
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	doc := `{"version":1,"sessions":[{"id":"pg-aaaaaaaaaaaa","created_at":"` + exp + `","expires_at":"` + exp + `","last_used":"` + exp + `","sha256":"` + hashCredential("apc_old") + `"}]}`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t, &fakePool{}, func(c *Config) { c.PageSessionsFile = file })
	if list, err := e.client.PageSessions(t.Context()); err != nil || len(list) != 0 {
		t.Errorf("PageSessions() after a version 1 file = %+v, %v; want none", list, err)
	}
	if _, err := apitest.PageBearer(t.Context(), nil, e.ts.URL, "pg-aaaaaaaaaaaa", "apc_old"); err == nil {
		t.Error("a page of a version 1 file authenticated")
	}
}
