package httpapi

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
)

// guardEnv is a Server served by the http.Server of HTTPServer (its
// timeouts and connection guard), on a real 127.0.0.1 port.
type guardEnv struct {
	srv  *Server
	ts   *httptest.Server
	addr string
}

func newGuardEnv(t *testing.T, fp *fakePool, limits ConnLimits, tweak func(*Config)) *guardEnv {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg, err := registry.New(registry.Config{Path: filepath.Join(t.TempDir(), "providers.json"), Logger: log})
	if err != nil {
		t.Fatalf("registry.New() error = %v", err)
	}
	cfg := Config{Pool: fp, Registry: reg, Token: testToken, Heartbeat: time.Hour, Logger: log, Conns: limits}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.Config = srv.HTTPServer(nil)
	ts.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		ts.CloseClientConnections()
		ts.Close()
		_ = reg.Close()
	})
	return &guardEnv{srv: srv, ts: ts, addr: ts.Listener.Addr().String()}
}

// dial opens a raw connection to the server, closed at the test's end.
func (e *guardEnv) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatalf("dial %s: %v", e.addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitStats waits until the guard counts unproven and proven connections.
func (e *guardEnv) waitStats(t *testing.T, unprovenN, provenN uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := e.srv.conns.stats()
		if st.open[unproven] == unprovenN && st.open[proven] == provenN {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("guard counts unproven %d, proven %d; want %d, %d", st.open[unproven], st.open[proven], unprovenN, provenN)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// request sends a GET on c (keep-alive) and returns the answer's status.
func request(t *testing.T, c net.Conn, br *bufio.Reader, path, token string) int {
	t.Helper()
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n"+auth+"\r\n"); err != nil {
		t.Fatalf("write request: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read answer to GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// isClosed says whether the server has closed c (a read ends at once with
// EOF or a reset) rather than kept it open (the read times out).
func isClosed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func TestConnGuardEvictsIdleUnprovenFirst(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newGuardEnv(t, fp, ConnLimits{MaxUnproven: 3}, nil)
	silent1 := e.dial(t)
	e.waitStats(t, 1, 0)
	idle := e.dial(t)
	if got := request(t, idle, bufio.NewReader(idle), "/v1/sessions", ""); got != http.StatusUnauthorized {
		t.Fatalf("GET /v1/sessions without a token = %d; want 401", got)
	}
	silent2 := e.dial(t)
	e.waitStats(t, 3, 0)
	// A fourth connection is past the cap: the idle keep-alive one goes,
	// although the first silent one is older.
	fourth := e.dial(t)
	e.waitStats(t, 3, 0)
	if !isClosed(idle) {
		t.Error("the idle unproven connection is open; want it closed to admit a new one")
	}
	for i, c := range []net.Conn{silent1, silent2, fourth} {
		if isClosed(c) {
			t.Errorf("connection %d closed; want only the idle one closed", i)
		}
	}
	// Nothing idle now: the oldest goes.
	e.dial(t)
	e.waitStats(t, 3, 0)
	if !isClosed(silent1) {
		t.Error("the oldest unproven connection is open; want it closed when none is idle")
	}
	if st := e.srv.conns.stats(); st.evicted[unproven] != 2 {
		t.Errorf("unproven connections closed = %d; want 2", st.evicted[unproven])
	}
}

func TestConnGuardProvenSurviveUnprovenFlood(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newGuardEnv(t, fp, ConnLimits{MaxUnproven: 4}, nil)
	owner := e.dial(t)
	br := bufio.NewReader(owner)
	if got := request(t, owner, br, "/v1/sessions", testToken); got != http.StatusOK {
		t.Fatalf("authorized GET /v1/sessions = %d; want 200", got)
	}
	e.waitStats(t, 0, 1)
	// Forty connections without the token, twenty of them idle after a
	// refused request: the owner's idle connection is never closed.
	for i := range 40 {
		c := e.dial(t)
		if i%2 == 0 {
			if got := request(t, c, bufio.NewReader(c), "/v1/sessions", ""); got != http.StatusUnauthorized {
				t.Fatalf("GET /v1/sessions without a token = %d; want 401", got)
			}
		}
	}
	e.waitStats(t, 4, 1)
	if got := request(t, owner, br, "/v1/sessions", testToken); got != http.StatusOK {
		t.Fatalf("authorized GET /v1/sessions on the owner's connection after the flood = %d; want 200", got)
	}
	// The metrics report both classes.
	if got := request(t, owner, br, "/metrics", testToken); got != http.StatusOK {
		t.Fatalf("GET /metrics = %d; want 200", got)
	}
}

func TestConnGuardProvenCapClosesIdleOnly(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newGuardEnv(t, fp, ConnLimits{MaxProven: 1}, nil)
	first := e.dial(t)
	if got := request(t, first, bufio.NewReader(first), "/v1/sessions", testToken); got != http.StatusOK {
		t.Fatalf("authorized GET = %d; want 200", got)
	}
	e.waitStats(t, 0, 1)
	second := e.dial(t)
	br := bufio.NewReader(second)
	if got := request(t, second, br, "/v1/sessions", testToken); got != http.StatusOK {
		t.Fatalf("authorized GET = %d; want 200", got)
	}
	e.waitStats(t, 0, 1)
	if !isClosed(first) {
		t.Error("the first proven connection, idle, is open past MaxProven 1; want it closed")
	}
	if got := request(t, second, br, "/v1/sessions", testToken); got != http.StatusOK {
		t.Errorf("authorized GET on the newer connection = %d; want 200", got)
	}
}

func TestConnGuardForgetsHijackedAndClosed(t *testing.T) {
	g := newConnGuard(ConnLimits{}.withDefaults(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	hijacked := make(chan net.Conn, 1)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.prove(r)
		if r.URL.Path != "/hijack" {
			return
		}
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack() error = %v", err)
			return
		}
		hijacked <- c
	}))
	ts.Config.ConnContext, ts.Config.ConnState = g.connContext, g.connState
	ts.Start()
	defer ts.Close()
	addr := ts.Listener.Addr().String()
	want := func(unprovenN, provenN uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			st := g.stats()
			if st.open == [2]uint64{unprovenN, provenN} {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("guard counts %v; want [%d %d]", st.open, unprovenN, provenN)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	c1, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	request(t, c1, bufio.NewReader(c1), "/plain", "")
	want(0, 1)
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := io.WriteString(c2, "GET /hijack HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	sc := <-hijacked
	defer sc.Close()
	want(0, 1) // the hijacked connection is its handler's now
	_ = c1.Close()
	want(0, 0)
	if len(g.conns) != 0 {
		t.Errorf("guard tracks %d connections; want none", len(g.conns))
	}
}

func TestConnLimitsFromFileLimit(t *testing.T) {
	for _, c := range []struct {
		in                 ConnLimits
		unprovenN, provenN int
	}{
		{ConnLimits{}, DefaultMaxUnproven, DefaultMaxProven},
		{ConnLimits{FileLimit: 20000}, DefaultMaxUnproven, DefaultMaxProven},
		{ConnLimits{FileLimit: 1024}, 256, 256},
		{ConnLimits{FileLimit: 20}, minConnCap, minConnCap},
		{ConnLimits{FileLimit: 1024, MaxUnproven: 700}, 700, 256},
	} {
		got := c.in.withDefaults()
		if got.MaxUnproven != c.unprovenN || got.MaxProven != c.provenN {
			t.Errorf("%+v.withDefaults() caps = %d, %d; want %d, %d", c.in, got.MaxUnproven, got.MaxProven, c.unprovenN, c.provenN)
		}
	}
}

// readMetrics returns the server's /metrics text.
func readMetrics(t *testing.T, e *guardEnv) string {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestConnGuardMetrics(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newGuardEnv(t, fp, ConnLimits{MaxUnproven: 1}, nil)
	e.dial(t)
	e.waitStats(t, 1, 0)
	e.dial(t)
	e.waitStats(t, 1, 0)
	m := readMetrics(t, e)
	for _, want := range []string{
		`agentpool_http_connections_closed_total{class="unproven"} 2`,
		`agentpool_http_connections{class="proven"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		_, _ = os.Stderr.WriteString(m)
	}
}

func TestIdleTimeoutSparesStreams(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	global := newLog(t, 64)
	fp.SubscribeAllFunc = func() *pool.Subscription { return global.Subscribe(0) }
	e := newGuardEnv(t, fp, ConnLimits{IdleTimeout: 300 * time.Millisecond, BodyTimeout: 200 * time.Millisecond}, nil)
	idle := e.dial(t)
	if got := request(t, idle, bufio.NewReader(idle), "/v1/sessions", testToken); got != http.StatusOK {
		t.Fatalf("authorized GET = %d; want 200", got)
	}
	stream := e.dial(t)
	if _, err := io.WriteString(stream, "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"+
		"Authorization: Bearer "+testToken+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(stream)
	_ = stream.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/events = %v, %v; want 200", resp, err)
	}
	time.Sleep(time.Second) // past the idle and body timeouts
	if !isClosed(idle) {
		t.Error("keep-alive connection open after 1 s idle; want it closed after IdleTimeout 300ms")
	}
	global.Publish("s9", backends.EventSessionCreated, 0, nil)
	_ = stream.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("event stream ended after 1 s: %v; want it kept open", err)
		}
		if strings.Contains(line, string(backends.EventSessionCreated)) {
			break
		}
	}
}

func TestConnGuardOrderOfEviction(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	g := newConnGuard(ConnLimits{MaxUnproven: 2}.withDefaults(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	g.now = func() time.Time { return clock }
	active, silent := &nopConn{}, &nopConn{}
	g.connState(active, http.StateNew)
	g.connState(active, http.StateActive) // half a request, the oldest
	clock = clock.Add(time.Millisecond)
	g.connState(silent, http.StateNew)
	tracked := func(c net.Conn) bool { _, ok := g.conns[c]; return ok }

	// Within the grace, the oldest goes: the half request.
	g.connState(&nopConn{}, http.StateNew)
	if tracked(active) || !tracked(silent) {
		t.Fatalf("within the grace: active tracked %v, silent tracked %v; want the older (active) closed", tracked(active), tracked(silent))
	}
	// Past the grace, a connection that sent nothing goes before an
	// older one under way.
	older := &nopConn{}
	g.connState(older, http.StateActive) // unknown to the guard: ignored
	clock = clock.Add(newConnGrace)
	g.connState(&nopConn{}, http.StateNew)
	if tracked(silent) {
		t.Error("past the grace: the silent connection is tracked; want it closed")
	}
	if st := g.stats(); st.open != [2]uint64{2, 0} || st.evicted != [2]uint64{2, 0} {
		t.Errorf("stats = %+v; want 2 unproven open and 2 closed", st)
	}
}
