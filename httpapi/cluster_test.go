package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/agentpool/agentpool/pool"
)

// clusterMap is the state the test hosts share, as a store would hold
// it: the hosts, their user tokens, which is alive, who owns which
// session, where new sessions go.
type clusterMap struct {
	key string

	mu      sync.Mutex
	hosts   map[string]ClusterHost
	alive   map[string]bool
	tokens  map[string]string // host → user token
	owners  map[string]string // session → host; none: the asking host
	placeOn string            // the host Place picks when not told
	// owner, if set, answers Owner instead of owners.
	owner func(self, session string) (string, error)
	// asked counts Owner calls by the host that made them.
	asked map[string]int
}

// testCluster is one host's view of a clusterMap.
type testCluster struct {
	m    *clusterMap
	self string
}

var _ Cluster = testCluster{}

func (c testCluster) Self() string { return c.self }

func (c testCluster) Owner(_ context.Context, session string) (ClusterHost, bool, error) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.asked[c.self]++
	id := c.m.owners[session]
	if c.m.owner != nil {
		var err error
		if id, err = c.m.owner(c.self, session); err != nil {
			return ClusterHost{}, false, err
		}
	}
	if id == "" {
		id = c.self
	}
	if !c.m.alive[id] {
		return ClusterHost{}, false, fmt.Errorf("session %q on host %q: %w", session, id, ErrSessionMoving)
	}
	return c.m.hosts[id], id == c.self, nil
}

func (c testCluster) Place(_ context.Context, agent, want string) (ClusterHost, bool, error) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	id := want
	if id == "" {
		id = c.m.placeOn
	}
	h, ok := c.m.hosts[id]
	switch {
	case !ok:
		return ClusterHost{}, false, fmt.Errorf("host %q: %w", id, ErrUnknownHost)
	case !c.m.alive[id]:
		return ClusterHost{}, false, fmt.Errorf("host %q: %w", id, ErrHostDown)
	}
	return h, id == c.self, nil
}

func (c testCluster) Key() string { return c.m.key }

func (c testCluster) KnownToken(tok string) bool {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	for id, t := range c.m.tokens {
		if c.m.alive[id] && tokenEqual(tok, t) {
			return true
		}
	}
	return false
}

// clusterEnv is hosts "a" and "b" sharing a clusterMap, each a real
// server on 127.0.0.1 over its own fake pool, with its own token.
type clusterEnv struct {
	m    *clusterMap
	a, b *testEnv
	logA *syncBuffer
	logB *syncBuffer
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const clusterKey = "cluster-key-0123456789abcdef"

// newClusterEnv serves fpA as host "a" and fpB as host "b"; both are
// alive, and new sessions go to "a" unless told.
func newClusterEnv(t testing.TB, fpA, fpB *fakePool) *clusterEnv {
	t.Helper()
	m := &clusterMap{key: clusterKey, hosts: map[string]ClusterHost{}, alive: map[string]bool{"a": true, "b": true},
		tokens: map[string]string{"a": "token-of-a-0123456789", "b": "token-of-b-0123456789"},
		owners: map[string]string{}, placeOn: "a", asked: map[string]int{}}
	ce := &clusterEnv{m: m, logA: &syncBuffer{}, logB: &syncBuffer{}}
	host := func(id string, fp *fakePool, sink io.Writer) *testEnv {
		return newTestEnv(t, fp, func(c *Config) {
			c.Cluster = testCluster{m: m, self: id}
			c.Token = m.tokens[id]
			c.Logger = slog.New(slog.NewTextHandler(sink, nil))
		})
	}
	ce.a = host("a", fpA, ce.logA)
	ce.b = host("b", fpB, ce.logB)
	m.hosts["a"] = ClusterHost{ID: "a", Advertise: ce.a.ts.URL}
	m.hosts["b"] = ClusterHost{ID: "b", Advertise: ce.b.ts.URL}
	return ce
}

// refusingPool is the pool of a host that must not be asked: every
// method fails the test.
func refusingPool(t testing.TB, host string) *fakePool {
	fail := func(what string) error {
		t.Errorf("the pool of host %s was asked to %s; the request should have gone to the owner", host, what)
		return fmt.Errorf("host %s: %w", host, pool.ErrNotFound)
	}
	return &fakePool{
		CreateFunc: func(context.Context, pool.CreateRequest) (pool.Session, error) { return pool.Session{}, fail("create") },
		GetFunc:    func(context.Context, string) (pool.Session, error) { return pool.Session{}, fail("get") },
		StartPromptFunc: func(context.Context, pool.PromptRequest) (pool.Turn, error) {
			return pool.Turn{}, fail("prompt")
		},
		SubscribeFunc: func(context.Context, string, int64) (*pool.Subscription, error) { return nil, fail("subscribe") },
		CloseFunc: func(context.Context, string, bool) (pool.CloseResult, error) {
			return pool.CloseResult{}, fail("close")
		},
	}
}

// rawCall sends a request to url with header and returns status and body.
func rawCall(t testing.TB, method, url, body string, header map[string]string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatalf("NewRequest(%s %s) error = %v", method, url, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s error = %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}
