package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// envDiskWritesNS marks TestDiskFullWriteEndpoints re-executed in its own
// mount namespace.
const envDiskWritesNS = "AGENTPOOL_TEST_DISKWRITES_NS"

// rawCall makes an API call with the daemon's token and returns the API
// error of a non-2xx answer (nil for 2xx).
func rawCall(ctx context.Context, c *httpapi.Client, token, method, path string, body any) (json.RawMessage, error) {
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&raw)
	if resp.StatusCode < 300 {
		return raw, nil
	}
	var eb struct {
		Error *httpapi.Error `json:"error"`
	}
	if err := json.Unmarshal(raw, &eb); err != nil || eb.Error == nil {
		return nil, fmt.Errorf("%s %s: status %d", method, path, resp.StatusCode)
	}
	eb.Error.Status = resp.StatusCode
	return nil, eb.Error
}

// TestDiskFullWriteEndpoints runs the daemon with its home, its worktrees
// and the repository on a 16 MiB tmpfs, fills it, and calls every write
// endpoint that can be reached without an agent waiting on it: each must
// answer 507 storage_full with a message that names the full file system
// (its mount point), not 500. Root only (a tmpfs in a private mount
// namespace).
func TestDiskFullWriteEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	if !inPrivateMountNS(t, envDiskWritesNS, true) {
		return
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	mountTmpfs(t, home, "16m")
	writeFakeProvider(t, home, agenttest.Script{Turns: []agenttest.Turn{{Echo: true,
		Steps: []agenttest.Step{{Chunks: 5}}}}})
	repo := e2eRepoAt(t, filepath.Join(home, "repo"), map[string]string{"README.md": "# r\n",
		".agentpool.json": `{"setup": {"command": ["true"]}}`})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	newSession := func() string {
		s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "fake"})
		if err != nil {
			t.Fatalf("create session: %v\n%s", err, d.out)
		}
		if tn, err := d.client.Prompt(ctx, s.ID, "", "hello", true); err != nil || tn.StopReason != "end_turn" {
			t.Fatalf("prompt = %+v, %v", tn, err)
		}
		return s.ID
	}
	s1, s2, s3 := newSession(), newSession(), newSession()
	// s3 holds uncommitted work: closing it must commit it first.
	if sess, err := d.client.Session(ctx, s3); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(sess.Worktree.Path, "work.txt"), []byte("unsaved work\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link, err := d.client.LoginLink(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, code, _ := strings.Cut(link.URL, "#code=")
	login := func() httpapi.Login {
		l, err := d.client.LoginLink(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, code, _ := strings.Cut(l.URL, "#code=")
		raw, err := rawCall(ctx, d.client, "", http.MethodPost, "/v1/login", httpapi.LoginRequest{Code: code})
		var page httpapi.Login
		if err != nil || json.Unmarshal(raw, &page) != nil {
			t.Fatalf("log in: %v", err)
		}
		return page
	}
	page1, page2 := login(), login()
	page1Bearer := pageBearer(t, d, page1)
	s4 := newSession()
	if _, err := d.client.CloseSession(ctx, s4, false); err != nil {
		t.Fatal(err)
	}
	setup, err := d.client.SetupFile(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}

	fill(t, filepath.Join(home, "filler"))

	calls := []struct {
		name         string
		method, path string
		body         any
	}{
		{"disable a provider", http.MethodPatch, "/v1/providers/fake", json.RawMessage(`{"enabled":false}`)},
		{"create a session", http.MethodPost, "/v1/sessions", pool.CreateRequest{Repo: repo, Agent: "fake"}},
		{"prompt", http.MethodPost, "/v1/sessions/" + s1 + "/prompt", map[string]any{"text": "full"}},
		{"retry", http.MethodPost, "/v1/sessions/" + s1 + "/retry", nil},
		{"restore", http.MethodPost, "/v1/sessions/" + s1 + "/restore", map[string]any{"turn": 1}},
		{"merge", http.MethodPost, "/v1/sessions/" + s2 + "/merge", httpapi.MergeRequest{}},
		{"close a session", http.MethodDelete, "/v1/sessions/" + s3, nil},
		{"trust a repository", http.MethodPost, "/v1/trust", httpapi.TrustRequest{Repo: repo, SHA256: setup.SHA256}},
		{"log in", http.MethodPost, "/v1/login", httpapi.LoginRequest{Code: code}},
		{"log out", http.MethodPost, "/v1/logout", nil},
		{"revoke a page session", http.MethodDelete, "/v1/page-sessions/" + page2.ID, nil},
		{"revoke every page session", http.MethodDelete, "/v1/page-sessions", nil},
		{"prune closed sessions", http.MethodPost, "/v1/prune", httpapi.PruneRequest{OlderThan: "0"}},
		{"replace the catalog", http.MethodPut, "/v1/catalog", json.RawMessage(catalogDoc)},
	}
	for _, c := range calls {
		// Topped up before each call: the daemon gives space back by
		// itself (the store truncates its WAL once writes stop).
		fill(t, filepath.Join(home, "filler"))
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		token := d.client.Token
		if c.name == "log out" {
			token = page1Bearer
		}
		_, err := rawCall(cctx, d.client, token, c.method, c.path, c.body)
		cancel()
		if c.name == "close a session" && err == nil {
			// Closing may find room for its commit (the daemon gives space
			// back by itself) and then frees the worktree's blocks. Then
			// nothing may be lost: the session is closed, and its work is
			// on its branch.
			if s, gerr := d.client.Session(ctx, s3); gerr != nil || s.Status != pool.StatusClosed {
				t.Errorf("close a session on a full disk answered success, but the session is %+v, %v", s, gerr)
			}
			if out := e2eGit(t, repo, "branch", "--list", "agentpool/"+s3); !strings.Contains(out, s3) {
				t.Errorf("close a session on a full disk answered success without keeping its branch agentpool/%s", s3)
			}
			t.Logf("%s: succeeded (it freed its worktree first)", c.name)
			continue
		}
		var ae *httpapi.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusInsufficientStorage || ae.Code != httpapi.CodeStorageFull ||
			!strings.Contains(ae.Message, "the file system mounted at "+home) {
			t.Errorf("%s (%s %s) with the disk full = %v; want 507 storage_full naming %s", c.name, c.method, c.path, err, home)
			continue
		}
		t.Logf("%s: %s", c.name, ae.Message)
	}
	if err := os.Remove(filepath.Join(home, "filler")); err != nil {
		t.Fatal(err)
	}
	// A revoke refused for the disk took effect at once; retried once space
	// is back, it is written, so that a restart does not bring the
	// credential back.
	if _, err := d.client.RevokePageSessions(ctx); err != nil {
		t.Fatalf("revoke page sessions after space returned: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(home, "page-sessions.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), page2.ID) || strings.Contains(string(b), page1.ID) {
		t.Errorf("page-sessions.json still holds revoked page sessions after the retried revoke:\n%s", b)
	}
}
