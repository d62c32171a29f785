package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/httpapi"
)

// tapListener records every byte its connections receive.
type tapListener struct {
	net.Listener
	mu  sync.Mutex
	raw bytes.Buffer
}

func (l *tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: c, l: l}, nil
}

// bytes returns what the listener's connections received so far.
func (l *tapListener) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.raw.Bytes())
}

type tapConn struct {
	net.Conn
	l *tapListener
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.mu.Lock()
	c.l.raw.Write(p[:n])
	c.l.mu.Unlock()
	return n, err
}

// captured is one request the impostor got.
type captured struct {
	method, uri string
	header      http.Header
	body        []byte
}

// TestEndToEndClusterImpostor: two built hosts on PostgreSQL, a session
// owned by host-b; host-b is killed with SIGKILL and another program binds
// its address (an HTTP server that records everything and answers
// anything 200). For ten seconds host-a is asked for that session (GET
// and prompt): what reaches the impostor holds no cluster key and nothing
// that works, for every request it captured, replayed against host-a as
// it came and as PATCH /v1/providers/work and POST /v1/login-links, is
// refused 401. Host-a answers 503 host_unreachable saying the host at
// that address could not prove it is host-b, and logs it.
func TestEndToEndClusterImpostor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs two daemons")
	}
	url := startPostgres(t)
	bin := agentpoolBinary(t)
	keyFile := clusterKeyFile(t)
	keyBytes, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyBytes))
	remote := sharedRemote(t)
	a := startClusterHost(t, bin, "host-a", url, keyFile)
	b := startClusterHost(t, bin, "host-b", url, keyFile)
	a.waitHosts(2)
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		snap, err := a.client.Providers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if w, _ := snap.Provider("work"); len(w.Hosts) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("provider work is not seen on both hosts")
		}
	}
	var created httpapi.CreatedSession
	if err := a.client.Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": remote, "agent": "work", "host": "host-b"}, &created); err != nil {
		t.Fatal(err)
	}
	id := created.ID
	promptRetry(t, a.client, id, "before the kill", 30*time.Second) // a forwards to b: a connection a keeps
	bAddr := strings.TrimPrefix(b.client.BaseURL, "http://")

	b.kill9()
	var ln net.Listener
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ln, err = net.Listen("tcp", bAddr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bind host-b's address %s after its death: %v", bAddr, err)
		}
	}
	tap := &tapListener{Listener: ln}
	var mu sync.Mutex
	var got []captured
	imp := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		mu.Lock()
		got = append(got, captured{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: body})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"host":"host-b","proof":"00"}`)
	})}
	go func() { _ = imp.Serve(tap) }()
	defer imp.Close()

	// Ten seconds of asking host-a for the session: first it is host-b's
	// (host-a reaches the impostor), then its lease expires and host-a
	// takes it over.
	unreachable := 0
	var other []string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, errGet := a.client.Session(rctx, id)
		_, errPrompt := a.client.Prompt(rctx, id, "", "while host-b is gone", false)
		cancel()
		for _, err := range []error{errGet, errPrompt} {
			var ae *httpapi.Error
			switch {
			case err == nil:
			case errors.As(err, &ae) && ae.Code == httpapi.CodeHostUnreachable:
				unreachable++
				if !strings.Contains(ae.Message, `could not prove it is host "host-b"`) || !strings.Contains(ae.Message, bAddr) {
					t.Errorf("host_unreachable = %q; want it to say the host at %s could not prove it is host-b", ae.Message, bAddr)
				}
			case errors.As(err, &ae) && (ae.Code == httpapi.CodeSessionMoving || ae.Code == httpapi.CodeBusy):
			default:
				other = append(other, err.Error())
			}
		}
	}
	if unreachable == 0 {
		t.Errorf("host-a never answered host_unreachable while the impostor held host-b's address (other errors: %q)", other)
	}
	if len(other) > 0 {
		t.Logf("other answers meanwhile: %q", other)
	}

	// What the impostor got: hellos only, no key, nothing that works.
	mu.Lock()
	reqs := append([]captured(nil), got...)
	mu.Unlock()
	if len(reqs) == 0 {
		t.Fatal("the impostor got no request: host-a never tried host-b's address")
	}
	raw := tap.bytes()
	for _, trace := range []string{key, base64.StdEncoding.EncodeToString([]byte(key)), httpapi.HeaderClusterKey} {
		if bytes.Contains(bytes.ToLower(raw), bytes.ToLower([]byte(trace))) {
			t.Errorf("the impostor received %q", trace)
		}
	}
	for _, r := range reqs {
		if !strings.HasPrefix(r.uri, "/v1/cluster/hello?") || r.header.Get(httpapi.HeaderSignature) != "" {
			t.Errorf("the impostor got %s %s (headers %v); want hellos only", r.method, r.uri, r.header)
		}
		for _, m := range []struct{ method, uri string }{{r.method, r.uri}, {"PATCH", "/v1/providers/work"}, {"POST", "/v1/login-links"}} {
			req, err := http.NewRequest(m.method, a.client.BaseURL+m.uri, bytes.NewReader(r.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, vs := range r.header {
				req.Header[k] = vs
			}
			if m.method == "PATCH" {
				req.Header.Set("Content-Type", "application/json")
				req.Body = io.NopCloser(strings.NewReader(`{"enabled":false}`))
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			// The captured hello replayed as it came is a hello: public,
			// and host-a is not host-b.
			want := http.StatusUnauthorized
			if m.uri == r.uri && strings.HasPrefix(r.uri, "/v1/cluster/hello?") {
				want = http.StatusConflict
			}
			if resp.StatusCode != want {
				t.Errorf("impostor's capture replayed to host-a as %s %s = %d %s; want %d", m.method, m.uri, resp.StatusCode, b, want)
			}
		}
	}
	t.Logf("the impostor got %d requests (%d bytes), all hellos; host-a answered host_unreachable %d times", len(reqs), len(raw), unreachable)

	// The session is host-a's now, and its provider untouched.
	turn := promptRetry(t, a.client, id, "after the takeover", 30*time.Second)
	if turn.StopReason != "end_turn" {
		t.Errorf("turn on host-a after the takeover = %+v", turn)
	}
	if snap, err := a.client.Providers(ctx); err == nil {
		if w, ok := snap.Provider("work"); !ok || !w.Enabled {
			t.Errorf("provider work after the replays: %+v; want it enabled still", w)
		}
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = a.cmd.Wait()
	if out := a.out.String(); !strings.Contains(out, "a host did not prove who it is") {
		t.Errorf("host-a's log does not say that the host at host-b's address failed its proof")
	}
}

// TestEndToEndClusterKeyMismatch: a host started with another cluster key
// than the live hosts' says so at start, naming the host that failed
// its proof, and does not join (see TestEndToEndClusterWrongKeyRefused);
// neither key crosses the wire.
func TestEndToEndClusterKeyMismatch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs two daemons")
	}
	url := startPostgres(t)
	bin := agentpoolBinary(t)
	a := startClusterHost(t, bin, "host-a", url, clusterKeyFile(t))
	other := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(other, []byte("another-cluster-key-0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runRefusedHost(t, bin, "host-b", url, other)
	want := `host host-a at ` + a.client.BaseURL + ` does not prove it holds this cluster key: started with a different --cluster-key-file?`
	if code == 0 || !strings.Contains(out, want) {
		t.Errorf("host-b exited %d; want non-zero, its log saying %q:\n%s", code, want, out)
	}
}
