package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// TestPromptIdempotencyKey, on a real pool: a prompt sent again with the
// key of one that started a turn gets that turn (running or ended) and
// starts none; another key starts a turn; a malformed key is refused
// with 400 naming the header. Then the client's own resend: a proxy that
// passes the first prompt on but breaks the client's connection before
// the answer makes the client send it again, with the same key, and the
// session has one turn for it.
func TestPromptIdempotencyKey(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	c := &realCluster{hosts: map[string]httpapi.ClusterHost{}, owners: map[string]string{}}
	repo := gitRepo(t)
	h := newRealHost(t, c, "a", repo)
	ctx, cancel := context.WithTimeout(context.Background(), realWait)
	defer cancel()
	made := c.createOn(ctx, t, h, "a", repo)

	post := func(base, key, text string, wait bool) (int, pool.Turn, string) {
		t.Helper()
		u := base + "/v1/sessions/" + made.ID + "/prompt"
		if wait {
			u += "?wait=true"
		}
		body, _ := json.Marshal(httpapi.PromptRequest{Text: text})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+h.token)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set(httpapi.IdempotencyKeyHeader, key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var tr pool.Turn
		_ = json.Unmarshal(raw, &tr)
		return resp.StatusCode, tr, string(raw)
	}
	turns := func() int {
		t.Helper()
		l, err := h.client.Turns(ctx, made.ID)
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}

	code, first, raw := post(h.url, "key-1", "first", true)
	if code != http.StatusOK || first.ID == 0 || first.EndedAt == nil {
		t.Fatalf("prompt with key-1 = %d %s; want 200 with the ended turn", code, raw)
	}
	for _, wait := range []bool{false, true} {
		code, again, raw := post(h.url, "key-1", "first", wait)
		if code/100 != 2 || again.ID != first.ID || again.Prompt != "first" {
			t.Errorf("prompt sent again with key-1 (wait %v) = %d %s; want turn %d", wait, code, raw, first.ID)
		}
	}
	if n := turns(); n != 1 {
		t.Errorf("%d turns after a prompt sent three times with one key; want 1", n)
	}
	if code, second, raw := post(h.url, "key-2", "second", true); code != http.StatusOK || second.ID == first.ID {
		t.Errorf("prompt with key-2 = %d %s; want a turn of its own", code, raw)
	}
	for _, bad := range []string{"has space", strings.Repeat("k", 201)} {
		code, _, raw := post(h.url, bad, "bad", false)
		if code != http.StatusBadRequest || !strings.Contains(raw, httpapi.IdempotencyKeyHeader) {
			t.Errorf("prompt with key %.20q = %d %s; want 400 naming %s", bad, code, raw, httpapi.IdempotencyKeyHeader)
		}
	}

	// The client's resend. The proxy passes every request on; the first
	// prompt's answer it drops, closing the client's connection.
	var mu sync.Mutex
	var keys []string
	broke := false
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, h.url+r.URL.RequestURI(), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		mu.Lock()
		isPrompt := strings.HasSuffix(r.URL.Path, "/prompt")
		if isPrompt {
			keys = append(keys, r.Header.Get(httpapi.IdempotencyKeyHeader))
		}
		drop := isPrompt && !broke
		broke = broke || isPrompt
		mu.Unlock()
		if drop {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(answer)
	}))
	defer proxy.Close()
	before := turns()
	via := &httpapi.Client{BaseURL: proxy.URL, Token: h.token}
	got, err := via.Prompt(ctx, made.ID, "", "through a broken connection", true)
	if err != nil || got.Prompt != "through a broken connection" || got.EndedAt == nil {
		t.Fatalf("Prompt through the breaking proxy = %+v, %v; want the ended turn", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("keys of the prompts the proxy saw = %q; want two sends with one key", keys)
	}
	if n := turns(); n != before+1 {
		t.Errorf("%d turns after a prompt the client sent twice; want %d", n, before+1)
	}
}
