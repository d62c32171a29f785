package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	"github.com/agentpool/agentpool/store"
	"github.com/agentpool/agentpool/worktree"
)

// realWait bounds the waits of the tests with real pools.
const realWait = 30 * time.Second

// realCluster is the hosts of a test, as a shared store would know them.
type realCluster struct {
	mu     sync.Mutex
	hosts  map[string]httpapi.ClusterHost
	owners map[string]string // session → host; none: the host asking
}

// createOn makes a session of the fake agent on host id (whose client is
// h) and records that it owns it.
func (c *realCluster) createOn(ctx context.Context, t *testing.T, h *realHost, id, repo string) httpapi.CreatedSession {
	t.Helper()
	made, err := h.client.Create(ctx, httpapi.CreateSessionRequest{CreateRequest: pool.CreateRequest{Repo: repo, Agent: "fake"}})
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.owners[made.ID] = id
	c.mu.Unlock()
	return made
}

// hostView is one host's view of a realCluster.
type hostView struct {
	c    *realCluster
	self string
}

func (v hostView) Self() string { return v.self }

func (v hostView) Owner(_ context.Context, session string) (httpapi.ClusterHost, bool, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	id := v.c.owners[session]
	if id == "" {
		id = v.self
	}
	return v.c.hosts[id], id == v.self, nil
}

func (v hostView) Place(_ context.Context, _, want string) (httpapi.ClusterHost, bool, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if want == "" {
		want = v.self
	}
	h, ok := v.c.hosts[want]
	if !ok {
		return httpapi.ClusterHost{}, false, httpapi.ErrUnknownHost
	}
	return h, want == v.self, nil
}

func (v hostView) Key() string { return "real-cluster-key-0123456789" }

func (v hostView) KnownToken(string) bool { return false }

// realHost is an httpapi server over a real pool (SQLite store, git
// worktrees, registry) whose provider "fake" is the scripted ACP agent.
type realHost struct {
	url, token string
	client     *httpapi.Client
}

// newRealHost starts host id of cluster c on repo; each of opts may change
// the server's configuration, given the host's store.
func newRealHost(t *testing.T, c *realCluster, id, repo string, opts ...func(*httpapi.Config, *store.Store)) *realHost {
	t.Helper()
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(agenttest.Script{})
	prov, _ := json.Marshal(map[string]any{"version": 1, "providers": map[string]any{"fake": map[string]any{
		"extends": "acp", "command": []string{exe},
		"env": map[string]string{agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(raw)}}}})
	provPath := filepath.Join(dir, "providers.json")
	if err := os.WriteFile(provPath, prov, 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Config{Path: provPath, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := worktree.NewManager(worktree.Config{Root: filepath.Join(dir, "worktrees"), TrustFile: filepath.Join(dir, "trusted.json"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(dir, "agentpool.db")})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pool.New(pool.Config{Store: wiring.Store{S: st}, Usage: wiring.Usage{S: st}, Worktrees: wiring.Worktrees{M: wt},
		Resolver: reg, Launcher: wiring.Launcher{Logger: quiet}, MemoryBudget: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	token := "token-of-" + id + "-0123456789"
	cfg := httpapi.Config{Pool: p, Registry: reg, Token: token, Logger: quiet, Heartbeat: time.Hour,
		Cluster: hostView{c: c, self: id}}
	for _, o := range opts {
		o(&cfg, st)
	}
	srv, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Shutdown()
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), realWait)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("pool Shutdown() error = %v", err)
		}
		_ = st.Close()
		wt.Close()
		_ = reg.Close()
	})
	c.mu.Lock()
	c.hosts[id] = httpapi.ClusterHost{ID: id, Advertise: ts.URL}
	c.mu.Unlock()
	return &realHost{url: ts.URL, token: token, client: &httpapi.Client{BaseURL: ts.URL, Token: token, ReconnectDelay: 10 * time.Millisecond}}
}

// gitRepo makes a repository with one commit.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	env := append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "README.md"}, {"commit", "-q", "-m", "init"}} {
		if args[0] == "add" {
			if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# test\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// Two hosts with real pools: a session placed on b through a, prompted
// through a; its events read through a are b's, each exactly once, and
// its stored stream through a is b's byte for byte.
func TestRealPoolsForwarding(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	c := &realCluster{hosts: map[string]httpapi.ClusterHost{}, owners: map[string]string{}}
	repo := gitRepo(t)
	a := newRealHost(t, c, "a", repo)
	b := newRealHost(t, c, "b", repo)
	ctx, cancel := context.WithTimeout(context.Background(), realWait)
	defer cancel()

	made, err := a.client.Create(ctx, httpapi.CreateSessionRequest{CreateRequest: pool.CreateRequest{Repo: repo, Agent: "fake"}, Host: "b"})
	if err != nil || made.Host != "b" {
		t.Fatalf("Create(host b) through a = %+v, %v; want a session on b", made, err)
	}
	c.mu.Lock()
	c.owners[made.ID] = "b"
	c.mu.Unlock()
	if _, err := b.client.Session(ctx, made.ID); err != nil {
		t.Fatalf("Session(%s) on b error = %v; want it made there", made.ID, err)
	}

	turn, err := a.client.Prompt(ctx, made.ID, "", "hello from a", true)
	if err != nil || turn.EndedAt == nil {
		t.Fatalf("Prompt(wait) through a = %+v, %v; want the ended turn", turn, err)
	}
	var through []backends.Event
	err = a.client.Events(ctx, made.ID, 0, func(ev backends.Event) error {
		through = append(through, ev)
		if ev.Type == backends.EventTurnEnded {
			return httpapi.ErrStop
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Events(%s) through a error = %v", made.ID, err)
	}
	direct, err := b.client.EventLog(ctx, made.ID, 0)
	if err != nil {
		t.Fatalf("EventLog(%s) on b error = %v", made.ID, err)
	}
	seen := map[int64]bool{}
	for i, ev := range through {
		if seen[ev.Seq] || i >= len(direct) || direct[i].Seq != ev.Seq || direct[i].Type != ev.Type {
			t.Fatalf("events through a = %v; want b's %v, each once", seqs(through), seqs(direct))
		}
		seen[ev.Seq] = true
	}
	if !strings.Contains(eventText(through), "hello from a") {
		t.Errorf("events through a %v hold no echo of the prompt", seqs(through))
	}

	raw := func(h *realHost) string {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url+"/v1/sessions/"+made.ID+"/events?follow=false", nil)
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return endStamp.ReplaceAllString(string(body), "")
	}
	if fa, fb := raw(a), raw(b); fa != fb {
		t.Errorf("stored stream through a =\n%s\nwant b's byte for byte:\n%s", fa, fb)
	}
}

// endStamp matches the time of a stream.end event (each stream's own).
var endStamp = regexp.MustCompile(`"time":"[^"]*","type":"stream.end"`)

func seqs(evs []backends.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, string(ev.Type))
	}
	return out
}

func eventText(evs []backends.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.Write(ev.Data)
	}
	return b.String()
}
