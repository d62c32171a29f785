package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAuth(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, func(c *Config) { c.AllowedHosts = []string{"agentpool.internal", "[fd00::1]"} })
	for _, tc := range []struct {
		name   string
		path   string
		auth   string // Authorization header; "-" for none
		host   string // Host header; "" for the test server's
		status int
		code   string
	}{
		{name: "no token", path: "/v1/sessions", auth: "-", status: 401, code: CodeUnauthorized},
		{name: "wrong token", path: "/v1/sessions", auth: "Bearer nope", status: 401, code: CodeUnauthorized},
		{name: "token prefix", path: "/v1/sessions", auth: "Bearer " + testToken[:10], status: 401, code: CodeUnauthorized},
		{name: "token longer", path: "/v1/sessions", auth: "Bearer " + testToken + "x", status: 401, code: CodeUnauthorized},
		{name: "basic scheme", path: "/v1/sessions", auth: "Basic " + testToken, status: 401, code: CodeUnauthorized},
		{name: "no scheme", path: "/v1/sessions", auth: testToken, status: 401, code: CodeUnauthorized},
		{name: "right token", path: "/v1/sessions", auth: "Bearer " + testToken, status: 200},
		{name: "lower-case scheme", path: "/v1/sessions", auth: "bearer " + testToken, status: 200},
		{name: "unknown route without token", path: "/v1/secret", auth: "-", status: 401, code: CodeUnauthorized},
		{name: "metrics without token", path: "/metrics", auth: "-", status: 401, code: CodeUnauthorized},
		{name: "events without token", path: "/v1/sessions/s1/events", auth: "-", status: 401, code: CodeUnauthorized},
		{name: "health without token", path: "/v1/health", auth: "-", status: 200},
		{name: "foreign host", path: "/v1/sessions", auth: "Bearer " + testToken, host: "evil.example:8080", status: 403, code: CodeForbiddenHost},
		{name: "foreign host health", path: "/v1/health", auth: "-", host: "evil.example", status: 403, code: CodeForbiddenHost},
		{name: "rebinding name of loopback", path: "/v1/sessions", auth: "Bearer " + testToken, host: "127.0.0.1.nip.io", status: 403, code: CodeForbiddenHost},
		{name: "localhost", path: "/v1/sessions", auth: "Bearer " + testToken, host: "localhost:1234", status: 200},
		{name: "ipv6 loopback", path: "/v1/sessions", auth: "Bearer " + testToken, host: "[::1]:1234", status: 200},
		{name: "allowed extra host", path: "/v1/sessions", auth: "Bearer " + testToken, host: "AgentPool.Internal:80", status: 200},
		{name: "allowed extra ipv6", path: "/v1/sessions", auth: "Bearer " + testToken, host: "[fd00::1]:80", status: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.ts.URL+tc.path, nil)
			if tc.auth != "-" {
				req.Header.Set("Authorization", tc.auth)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("GET %s error = %v", tc.path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("GET %s (auth %q, host %q) status = %d; want %d (%s)", tc.path, tc.auth, tc.host, resp.StatusCode, tc.status, body)
			}
			if tc.code != "" && !strings.Contains(string(body), `"code":"`+tc.code+`"`) {
				t.Errorf("GET %s body = %s; want code %q", tc.path, body, tc.code)
			}
			if tc.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s: 401 without WWW-Authenticate", tc.path)
			}
		})
	}
}

func TestHealthCountsNeedToken(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	anon := &Client{BaseURL: e.ts.URL}
	h, err := anon.Health(t.Context())
	if err != nil || h.Status != "ok" || h.Version != "v-test" || h.Sessions != nil || h.Backends != nil {
		t.Errorf("Health() without token = %+v, %v; want ok, v-test and no counts", h, err)
	}
	h, err = e.client.Health(t.Context())
	if err != nil || h.Sessions == nil || *h.Sessions != 2 || h.Backends == nil || *h.Backends != 3 {
		t.Errorf("Health() with token = %+v, %v; want 2 sessions and 3 backends", h, err)
	}
}

func TestNoTokenConfigured(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, func(c *Config) { c.Token = "" })
	if _, err := (&Client{BaseURL: e.ts.URL}).Sessions(t.Context()); err != nil {
		t.Errorf("Sessions() on a server without a token error = %v; want nil", err)
	}
}

func TestTokenEqual(t *testing.T) {
	for _, tc := range []struct {
		got, want string
		eq        bool
	}{
		{"abc", "abc", true},
		{"abd", "abc", false},
		{"ab", "abc", false},
		{"abcd", "abc", false},
		{"", "abc", false},
		{"", "", true},
	} {
		if eq := tokenEqual(tc.got, tc.want); eq != tc.eq {
			t.Errorf("tokenEqual(%q, %q) = %v; want %v", tc.got, tc.want, eq, tc.eq)
		}
	}
}

func TestListenCheck(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:7070", "", true},
		{"127.0.0.2:0", "", true},
		{"[::1]:7070", "", true},
		{"localhost:7070", "", true},
		{"0.0.0.0:7070", "", false},
		{":7070", "", false},
		{"192.168.1.5:7070", "", false},
		{"[::]:7070", "", false},
		{"example.com:7070", "", false},
		{"0.0.0.0:7070", "tok", true},
		{"nonsense", "tok", false},
	} {
		err := ListenCheck(tc.addr, tc.token)
		if (err == nil) != tc.ok {
			t.Errorf("ListenCheck(%q, %q) error = %v; want ok = %v", tc.addr, tc.token, err, tc.ok)
		}
		if !tc.ok && tc.addr != "nonsense" && !errors.Is(err, ErrInsecureListen) {
			t.Errorf("ListenCheck(%q, %q) error = %v; want ErrInsecureListen", tc.addr, tc.token, err)
		}
	}
}

func TestLoadOrCreateToken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	tok, err := LoadOrCreateToken(path)
	if err != nil || len(tok) != 2*tokenBytes {
		t.Fatalf("LoadOrCreateToken(%q) = %q, %v; want a new %d-character token", path, tok, err, 2*tokenBytes)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode = %v, %v; want 0600", fi.Mode(), err)
	}
	again, err := LoadOrCreateToken(path)
	if err != nil || again != tok {
		t.Errorf("LoadOrCreateToken(%q) second time = %q, %v; want the same token %q", path, again, err, tok)
	}
	other, _ := LoadOrCreateToken(filepath.Join(dir, "other"))
	if other == tok {
		t.Errorf("two new tokens are equal: %q", tok)
	}

	for _, tc := range []struct {
		name    string
		content string
		mode    os.FileMode
	}{
		{"readable by others", "abc\n", 0o644},
		{"empty", "\n", 0o600},
		{"two words", "abc def\n", 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(p, []byte(tc.content), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			if tok, err := LoadOrCreateToken(p); !errors.Is(err, ErrTokenFile) {
				t.Errorf("LoadOrCreateToken(%s file) = %q, %v; want ErrTokenFile", tc.name, tok, err)
			}
		})
	}
	if _, err := LoadOrCreateToken(filepath.Join(dir, "no", "such", "dir", "token")); err == nil {
		t.Errorf("LoadOrCreateToken in a missing directory error = nil; want an error")
	}
}

func TestErrorBodyShape(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	_, _, body := e.send(t, apiCall{method: "POST", path: "/v1/sessions/s1/prompt", body: `{"text": 3}`})
	var raw map[string]map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	eb := raw["error"]
	if len(raw) != 1 || eb["code"] != CodeBadRequest || eb["message"] == "" || eb["field"] != "text" {
		t.Errorf("error body = %s; want exactly {\"error\": {\"code\": \"bad_request\", \"message\": ..., \"field\": \"text\"}}", body)
	}
}
