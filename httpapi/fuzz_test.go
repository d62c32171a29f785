package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/pool"
)

// fuzzRoutes are the endpoints that read a JSON body.
var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/v1/sessions"},
	{"POST", "/v1/sessions/s1/prompt"},
	{"POST", "/v1/sessions/s1/prompt?wait=true"},
	{"POST", "/v1/sessions/s1/permissions/r1"},
	{"POST", "/v1/sessions/s1/restore"},
	{"PATCH", "/v1/providers/claude"},
	{"PATCH", "/v1/providers/my-agent"},
	{"POST", "/v1/sessions/s1/cancel"},
	{"POST", "/v1/providers/refresh"},
}

// FuzzHandlers posts arbitrary bodies to the JSON endpoints: the answer is
// never a 5xx and never a panic, and every error has an error body.
func FuzzHandlers(f *testing.F) {
	seeds := []string{
		``, `{}`, `null`, `[]`, `"x"`, `1e999`, `{"repo":"/r","agent":"demo"}`, `{"text":"hi","agent":"demo"}`,
		`{"choice":"allow_once"}`, `{"turn":1,"after":true}`, `{"enabled":false}`, `{"extends":"acp","command":["x"]}`,
		`{"env":{"A":"b"}}`, `{"permissions":{"edit":"ask"}}`, `{"text":"` + strings.Repeat("é", 50) + `"}`,
		`{"repo":"/r","agent":"demo"} trailing`, `{"a":`, "\xff\xfe", `{"turn":-1}`, `{"turn":1e30}`, `{"enabled":null}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), []byte(s))
	}
	fp := &fakePool{}
	sessionWorld(fp)
	fp.CreateFunc = func(_ context.Context, r pool.CreateRequest) (pool.Session, error) {
		if !filepath.IsAbs(r.Repo) {
			return pool.Session{}, fmt.Errorf("%w: repo %q is not an absolute path", pool.ErrInvalid, r.Repo)
		}
		return pool.Session{ID: "s-new", Repo: r.Repo, ActiveAgent: r.Agent}, nil
	}
	e := newTestEnv(f, fp, func(c *Config) { c.MaxBody = 4 << 10 })
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		req := httptest.NewRequest(rt.method, rt.path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code >= 500 || rec.Code < 200 {
			t.Fatalf("%s %s with body %q = %d %s; want no 5xx", rt.method, rt.path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && !bytes.Contains(rec.Body.Bytes(), []byte(`{"error":{"code":"`)) {
			t.Fatalf("%s %s with body %q = %d %s; want an error body", rt.method, rt.path, body, rec.Code, rec.Body)
		}
		if rec.Code == http.StatusOK && rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s = 200 with Content-Type %q", rt.method, rt.path, rec.Header().Get("Content-Type"))
		}
	})
}
