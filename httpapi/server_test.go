package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// apiCall is one request of a table test.
type apiCall struct {
	name   string
	method string
	path   string
	body   string
	header map[string]string
	status int
	code   string // error code, "" for a success
	field  string // error field, if any
	want   string // a substring of the answer body, if any
}

// send makes the call with the test token and returns status, headers and body.
func (e *testEnv) send(t *testing.T, c apiCall) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, e.ts.URL+c.path, body)
	if err != nil {
		t.Fatalf("NewRequest(%s %s) error = %v", c.method, c.path, err)
	}
	req.Header.Set("Authorization", "Bearer "+e.token)
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s error = %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", c.method, c.path, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// check runs a table of calls against e.
func (e *testEnv) check(t *testing.T, calls []apiCall) {
	t.Helper()
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			status, h, body := e.send(t, c)
			if status != c.status {
				t.Fatalf("%s %s status = %d; want %d (body %s)", c.method, c.path, status, c.status, body)
			}
			if c.want != "" && !strings.Contains(body, c.want) {
				t.Errorf("%s %s body = %s; want it to contain %q", c.method, c.path, body, c.want)
			}
			if c.code == "" {
				return
			}
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s %s Content-Type = %q; want application/json", c.method, c.path, ct)
			}
			var eb struct {
				Error *Error `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &eb); err != nil || eb.Error == nil {
				t.Fatalf("%s %s error body = %s; want {\"error\": {...}} (%v)", c.method, c.path, body, err)
			}
			if eb.Error.Code != c.code || eb.Error.Field != c.field || eb.Error.Message == "" {
				t.Errorf("%s %s error = %+v; want code %q, field %q and a message", c.method, c.path, eb.Error, c.code, c.field)
			}
		})
	}
}

func TestSessionEndpoints(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	e.check(t, []apiCall{
		{name: "create", method: "POST", path: "/v1/sessions", body: `{"repo":"/r","agent":"demo"}`, status: 201, want: `"id":"s-new"`},
		{name: "create with id", method: "POST", path: "/v1/sessions", body: `{"id":"x1","repo":"/r","agent":"demo","title":"t","base_ref":"main"}`, status: 201, want: `"id":"x1"`},
		{name: "create no repo", method: "POST", path: "/v1/sessions", body: `{"agent":"demo"}`, status: 400, code: CodeBadRequest, field: "repo"},
		{name: "create no agent", method: "POST", path: "/v1/sessions", body: `{"repo":"/r"}`, status: 201, want: `"active_agent":"demo"`},
		{name: "create unknown field", method: "POST", path: "/v1/sessions", body: `{"repo":"/r","agent":"demo","colour":1}`, status: 400, code: CodeBadRequest, field: "colour"},
		{name: "create wrong type", method: "POST", path: "/v1/sessions", body: `{"repo":5,"agent":"demo"}`, status: 400, code: CodeBadRequest, field: "repo"},
		{name: "create with mcp servers", method: "POST", path: "/v1/sessions", body: `{"repo":"/r","agent":"demo","mcp_servers":{"fs":{"command":"mcp-fs","env":{"T":"v"}}}}`, status: 201, want: `"id":"s-new"`},
		{name: "create bad mcp server", method: "POST", path: "/v1/sessions", body: `{"repo":"/r","agent":"demo","mcp_servers":{"gh":{"type":"http","url":"ftp://x"}}}`, status: 400, code: CodeBadRequest, field: "mcp_servers", want: "mcp_servers.gh.url"},
		{name: "create mcp unknown field", method: "POST", path: "/v1/sessions", body: `{"repo":"/r","agent":"demo","mcp_servers":{"fs":{"command":"c","cwd":"/"}}}`, status: 400, code: CodeBadRequest, field: "cwd"},
		{name: "create mcp placeholder", method: "POST", path: "/v1/sessions", body: `{"repo":"/r","agent":"demo","mcp_servers":{"fs":{"command":"c","env":{"T":"<redacted>"}}}}`, status: 400, code: CodeBadRequest, field: "mcp_servers", want: "real value"},
		{name: "create malformed", method: "POST", path: "/v1/sessions", body: `{"repo":`, status: 400, code: CodeBadRequest},
		{name: "create trailing", method: "POST", path: "/v1/sessions", body: `{"repo":"/r","agent":"demo"} {}`, status: 400, code: CodeBadRequest},
		{name: "create array", method: "POST", path: "/v1/sessions", body: `[1,2]`, status: 400, code: CodeBadRequest},
		{name: "create empty", method: "POST", path: "/v1/sessions", status: 400, code: CodeBadRequest},
		{name: "create wrong type header", method: "POST", path: "/v1/sessions", body: `{"repo":"/r","agent":"demo"}`, header: map[string]string{"Content-Type": "text/plain"}, status: 415, code: CodeUnsupportedMedia, field: "Content-Type"},
		{name: "create disabled agent", method: "POST", path: "/v1/sessions", body: `{"id":"disabled","repo":"/r","agent":"claude"}`, status: 409, code: CodeProviderDisabled},
		{name: "create at capacity", method: "POST", path: "/v1/sessions", body: `{"id":"full","repo":"/r","agent":"demo"}`, status: 503, code: CodeAtCapacity},
		{name: "list", method: "GET", path: "/v1/sessions", status: 200, want: `"id":"b"`},
		{name: "get", method: "GET", path: "/v1/sessions/s1", status: 200, want: `"id":"s1"`},
		{name: "get missing", method: "GET", path: "/v1/sessions/missing", status: 404, code: CodeNotFound},
		{name: "get internal", method: "GET", path: "/v1/sessions/boom", status: 500, code: CodeInternal},
		{name: "close", method: "DELETE", path: "/v1/sessions/s1", status: 200, want: `"committed":true`},
		{name: "close discard", method: "DELETE", path: "/v1/sessions/s1?discard=true", status: 200, want: `"discarded":true`},
		{name: "close bad discard", method: "DELETE", path: "/v1/sessions/s1?discard=maybe", status: 400, code: CodeBadRequest, field: "discard"},
		{name: "close busy", method: "DELETE", path: "/v1/sessions/busy", status: 409, code: CodeBusy},
		{name: "prompt", method: "POST", path: "/v1/sessions/s1/prompt", body: `{"agent":"demo","text":"hi"}`, status: 202, want: `"id":7`},
		{name: "prompt wait", method: "POST", path: "/v1/sessions/s1/prompt?wait=true", body: `{"text":"hi"}`, status: 200, want: `"stop_reason":"end_turn"`},
		{name: "prompt no text", method: "POST", path: "/v1/sessions/s1/prompt", body: `{"agent":"demo"}`, status: 400, code: CodeBadRequest, field: "text"},
		{name: "prompt blank text", method: "POST", path: "/v1/sessions/s1/prompt", body: `{"text":"  "}`, status: 400, code: CodeBadRequest, field: "text"},
		{name: "prompt text number", method: "POST", path: "/v1/sessions/s1/prompt", body: `{"text":1}`, status: 400, code: CodeBadRequest, field: "text"},
		{name: "prompt busy", method: "POST", path: "/v1/sessions/busy/prompt", body: `{"text":"hi"}`, status: 409, code: CodeBusy},
		{name: "prompt full", method: "POST", path: "/v1/sessions/full/prompt", body: `{"text":"hi"}`, status: 503, code: CodeAtCapacity},
		{name: "prompt failing", method: "POST", path: "/v1/sessions/failing/prompt", body: `{"text":"hi"}`, status: 409, code: CodeAgentFailing},
		{name: "prompt closed", method: "POST", path: "/v1/sessions/closed/prompt", body: `{"text":"hi"}`, status: 409, code: CodeClosed},
		{name: "prompt missing", method: "POST", path: "/v1/sessions/missing/prompt", body: `{"text":"hi"}`, status: 404, code: CodeNotFound},
		{name: "prompt disabled", method: "POST", path: "/v1/sessions/disabled/prompt", body: `{"text":"hi"}`, status: 409, code: CodeProviderDisabled},
		{name: "cancel", method: "POST", path: "/v1/sessions/s1/cancel", status: 200, want: `"cancelled":true`},
		{name: "cancel no turn", method: "POST", path: "/v1/sessions/noturn/cancel", status: 404, code: CodeNoTurn},
		{name: "retry", method: "POST", path: "/v1/sessions/s1/retry", status: 202, want: `"id":8`},
		{name: "turns", method: "GET", path: "/v1/sessions/s1/turns", status: 200, want: `"id":2`},
		{name: "turn", method: "GET", path: "/v1/sessions/s1/turns/2", status: 200, want: `"id":2`},
		{name: "turn wait", method: "GET", path: "/v1/sessions/s1/turns/2?wait=true", status: 200, want: `"stop_reason":"end_turn"`},
		{name: "turn absent", method: "GET", path: "/v1/sessions/s1/turns/9", status: 404, code: CodeNoTurn},
		{name: "turn not a number", method: "GET", path: "/v1/sessions/s1/turns/x", status: 400, code: CodeBadRequest, field: "turn"},
	})
}

func TestWorkEndpoints(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	e.check(t, []apiCall{
		{name: "pending", method: "GET", path: "/v1/sessions/s1/permissions", status: 200, want: `"id":"r1"`},
		{name: "pending missing", method: "GET", path: "/v1/sessions/missing/permissions", status: 404, code: CodeNotFound},
		{name: "answer", method: "POST", path: "/v1/sessions/s1/permissions/r1", body: `{"choice":"allow_once"}`, status: 200, want: `"choice":"allow_once"`},
		{name: "answer deny", method: "POST", path: "/v1/sessions/s1/permissions/r1", body: `{"choice":"deny"}`, status: 200},
		{name: "answer unknown request", method: "POST", path: "/v1/sessions/s1/permissions/r2", body: `{"choice":"allow_once"}`, status: 404, code: CodeUnknownRequest},
		{name: "answer bad choice", method: "POST", path: "/v1/sessions/s1/permissions/r1", body: `{"choice":"maybe"}`, status: 400, code: CodeInvalidChoice, field: "choice"},
		{name: "answer no choice", method: "POST", path: "/v1/sessions/s1/permissions/r1", body: `{}`, status: 400, code: CodeBadRequest, field: "choice"},
		{name: "diff", method: "GET", path: "/v1/sessions/s1/diff", status: 200, want: `"additions":1`},
		{name: "diff turn", method: "GET", path: "/v1/sessions/s1/diff?turn=2", status: 200, want: `"to":"2"`},
		{name: "diff patch", method: "GET", path: "/v1/sessions/s1/diff?format=patch", status: 200, want: "+++ b/a.txt"},
		{name: "diff bad turn", method: "GET", path: "/v1/sessions/s1/diff?turn=-1", status: 400, code: CodeBadRequest, field: "turn"},
		{name: "diff bad format", method: "GET", path: "/v1/sessions/s1/diff?format=html", status: 400, code: CodeBadRequest, field: "format"},
		{name: "diff closed", method: "GET", path: "/v1/sessions/closed/diff", status: 409, code: CodeClosed},
		{name: "restore", method: "POST", path: "/v1/sessions/s1/restore", body: `{"turn":2,"after":true}`, status: 200, want: `"after":true`},
		{name: "restore no turn field", method: "POST", path: "/v1/sessions/s1/restore", body: `{"after":true}`, status: 400, code: CodeBadRequest, field: "turn"},
		{name: "restore absent turn", method: "POST", path: "/v1/sessions/s1/restore", body: `{"turn":9}`, status: 404, code: CodeNoTurn},
		{name: "restore busy", method: "POST", path: "/v1/sessions/busy/restore", body: `{"turn":1}`, status: 409, code: CodeBusy},
		{name: "restore turn string", method: "POST", path: "/v1/sessions/s1/restore", body: `{"turn":"1"}`, status: 400, code: CodeBadRequest, field: "turn"},
		{name: "pool", method: "GET", path: "/v1/pool", status: 200, want: `"pid":42`},
		{name: "no route", method: "GET", path: "/v1/nothing", status: 404, code: CodeNotFound},
		{name: "wrong method", method: "PUT", path: "/v1/sessions/s1", status: 405, code: CodeMethodNotAllowed},
	})
}

func TestProviderEndpoints(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	etag := e.reg.Snapshot().ETag
	e.check(t, []apiCall{
		{name: "list", method: "GET", path: "/v1/providers", status: 200, want: `"id":"demo"`},
		{name: "patch stale", method: "PATCH", path: "/v1/providers/claude", body: `{"enabled":false}`, header: map[string]string{"If-Match": `"0000"`}, status: 412, code: CodePreconditionFailed},
		{name: "patch invalid", method: "PATCH", path: "/v1/providers/claude", body: `{"enabeld":false}`, status: 422, code: CodeInvalidConfig, want: "enabeld"},
		{name: "patch not json", method: "PATCH", path: "/v1/providers/claude", body: `{enabled`, status: 422, code: CodeInvalidConfig},
		{name: "patch empty", method: "PATCH", path: "/v1/providers/claude", status: 400, code: CodeBadRequest},
		{name: "patch media type", method: "PATCH", path: "/v1/providers/claude", body: `{}`, header: map[string]string{"Content-Type": "application/xml"}, status: 415, code: CodeUnsupportedMedia, field: "Content-Type"},
		{name: "patch", method: "PATCH", path: "/v1/providers/claude", body: `{"enabled":false}`, header: map[string]string{"If-Match": etag, "Content-Type": mergePatchType}, status: 200, want: `"enabled":false`},
		{name: "patch reused etag", method: "PATCH", path: "/v1/providers/claude", body: `{"enabled":true}`, header: map[string]string{"If-Match": etag}, status: 412, code: CodePreconditionFailed},
		{name: "refresh", method: "POST", path: "/v1/providers/refresh", status: 200, want: `"providers"`},
		{name: "probe without prober", method: "POST", path: "/v1/providers/demo/probe", status: 409, code: CodeUnsupported},
		{name: "probe unknown", method: "POST", path: "/v1/providers/nope/probe", status: 404, code: CodeUnknownProvider},
	})
	snap := e.reg.Snapshot()
	if p, ok := snap.Provider("claude"); !ok || p.Enabled {
		t.Errorf("after PATCH {\"enabled\":false}: claude = %+v, %v; want disabled", p, ok)
	}
	status, h, _ := e.send(t, apiCall{method: "GET", path: "/v1/providers"})
	if status != 200 || h.Get("ETag") != snap.ETag || snap.ETag == etag {
		t.Errorf("GET /v1/providers: status %d ETag %q; want 200 and the new file's ETag %q (old %q)", status, h.Get("ETag"), snap.ETag, etag)
	}
}

func TestRefreshRejectedFile(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	writeFile(t, e.file, `{"version": 1, "providers": {"claude": {"enabled": "yes"}}}`)
	status, _, body := e.send(t, apiCall{method: "POST", path: "/v1/providers/refresh"})
	if status != 422 || !strings.Contains(body, `"code":"invalid_config"`) || !strings.Contains(body, `"path":"providers.claude.enabled"`) {
		t.Errorf("POST /v1/providers/refresh with a bad file = %d %s; want 422 invalid_config with a diagnostic at providers.claude.enabled", status, body)
	}
}

func TestOversizedBody(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, func(c *Config) { c.MaxBody = 64 })
	big := `{"text":"` + strings.Repeat("x", 100) + `"}`
	for _, c := range []apiCall{
		{name: "prompt", method: "POST", path: "/v1/sessions/s1/prompt", body: big, status: 413, code: CodeTooLarge},
		{name: "patch", method: "PATCH", path: "/v1/providers/claude", body: `{"description":"` + strings.Repeat("x", 100) + `"}`, status: 413, code: CodeTooLarge},
		{name: "fits", method: "POST", path: "/v1/sessions/s1/prompt", body: `{"text":"hi"}`, status: 202},
	} {
		e.check(t, []apiCall{c})
	}
}

func TestAtCapacityRetryAfter(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	status, h, _ := e.send(t, apiCall{method: "POST", path: "/v1/sessions/full/prompt", body: `{"text":"hi"}`})
	if status != 503 || h.Get("Retry-After") != "5" {
		t.Errorf("prompt at capacity: status %d Retry-After %q; want 503 and 5", status, h.Get("Retry-After"))
	}
	_, err := e.client.Prompt(t.Context(), "full", "", "hi", false)
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != CodeAtCapacity || ae.RetryAfter.Seconds() != 5 || ae.Status != 503 {
		t.Errorf("Client.Prompt at capacity error = %#v; want *Error at_capacity, 503, RetryAfter 5s", err)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("WriteFile(%q) error = %v", path, err)
	}
}
