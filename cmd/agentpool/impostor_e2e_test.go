package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// impostor is another user's program on the daemon's port while the
// daemon is down: it answers every request as a daemon would (a hello
// with a made-up proof, 200 with an empty object for the rest) and keeps
// everything it was sent.
type impostor struct {
	srv *http.Server
	ln  net.Listener
	mu  sync.Mutex
	got []capturedRequest
}

// capturedRequest is one request an impostor received.
type capturedRequest struct {
	Method, URI string
	Header      http.Header
	Body        []byte
}

// startImpostor listens on addr (the daemon's, free since it died).
func startImpostor(t *testing.T, addr string) *impostor {
	t.Helper()
	var ln net.Listener
	var err error
	for range 100 { // the killed daemon's socket may linger a moment
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the impostor cannot bind %s: %v", addr, err)
	}
	im := &impostor{ln: ln}
	im.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		im.mu.Lock()
		im.got = append(im.got, capturedRequest{Method: r.Method, URI: r.RequestURI, Header: r.Header.Clone(), Body: body})
		im.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if strings.HasPrefix(r.URL.Path, "/v1/hello") {
			fmt.Fprintf(w, `{"proof":%q}`, strings.Repeat("5a", 32))
			return
		}
		fmt.Fprint(w, `{"sessions":[],"providers":[]}`)
	})}
	go func() { _ = im.srv.Serve(ln) }()
	t.Cleanup(im.stop)
	return im
}

// stop closes the impostor's port.
func (im *impostor) stop() { _ = im.srv.Close() }

// captured returns what the impostor received.
func (im *impostor) captured() []capturedRequest {
	im.mu.Lock()
	defer im.mu.Unlock()
	return append([]capturedRequest(nil), im.got...)
}

// secretsIn returns every string an impostor could try as a credential:
// each header value, each word of it, and each token-looking piece of the
// bodies and URIs.
func secretsIn(reqs []capturedRequest) []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		s = strings.TrimSpace(s)
		if len(s) >= 8 && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	word := regexp.MustCompile(`[A-Za-z0-9_\-+/=.]{16,}`)
	for _, r := range reqs {
		for _, vs := range r.Header {
			for _, v := range vs {
				add(v)
				for _, f := range strings.Fields(v) {
					add(f)
				}
			}
		}
		for _, m := range word.FindAllString(string(r.Body)+" "+r.URI, -1) {
			add(m)
		}
	}
	return out
}

// TestImpostorOnDaemonPortGetsNoToken: after kill -9 of the daemon, with
// its daemon.json left behind naming a pid that is alive again (another
// process took the number), another program binds the daemon's port. The
// CLI and a long-running MCP server refuse to talk to it and say why; it
// receives no token, and nothing it received works against the daemon
// once that is back on the same port.
func TestImpostorOnDaemonPortGetsNoToken(t *testing.T) {
	bin := agentpoolBinary(t)
	home := t.TempDir()
	d := startDaemon(t, bin, home)
	info, err := readDaemonFile(home)
	if err != nil {
		t.Fatal(err)
	}
	token := d.client.Token
	if out, err := d.cli("session", "list"); err != nil {
		t.Fatalf("session list with the daemon up: %v\n%s", err, out)
	}
	mcpc := startMCP(t, bin, home, t.TempDir())
	mcpc.call("list_sessions", nil, nil, false)

	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	_ = d.cmd.Wait()
	// The pid in daemon.json is alive again: a process that stands for
	// whatever took the number since.
	stand := exec.Command("sleep", "120")
	if err := stand.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stand.Process.Kill(); _ = stand.Wait() })
	if err := writeDaemonFile(home, daemonInfo{Addr: info.Addr, PID: stand.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	im := startImpostor(t, info.Addr)

	for _, args := range [][]string{{"session", "list"}, {"ps"}, {"providers", "list"}, {"open"}} {
		out, err := d.cli(args...)
		if err == nil {
			t.Errorf("agentpool %s with an impostor on the port succeeded:\n%s", strings.Join(args, " "), out)
			continue
		}
		for _, want := range []string{"is not the daemon of " + home, "the token was not sent", "serve"} {
			if !strings.Contains(out, want) {
				t.Errorf("agentpool %s with an impostor on the port said:\n%s\nwant it to say %q", strings.Join(args, " "), out, want)
			}
		}
	}
	text, _ := mcpc.call("list_sessions", nil, nil, true)
	if !strings.Contains(text, "did not prove") {
		t.Errorf("the MCP server's list_sessions with an impostor on the port said %q; want that the program did not prove itself", text)
	}

	got := im.captured()
	if len(got) == 0 {
		t.Fatal("the impostor received nothing: the test proves nothing")
	}
	for _, r := range got {
		all := fmt.Sprintf("%s %s %v %s", r.Method, r.URI, r.Header, r.Body)
		if strings.Contains(all, token) || r.Header.Get("Authorization") != "" {
			t.Errorf("the impostor received the token or a credential: %s", all)
		}
		if !strings.HasPrefix(r.URI, "/v1/hello?") {
			t.Errorf("the impostor received %s %s; want nothing but hellos", r.Method, r.URI)
		}
	}

	// The daemon comes back on the same port: nothing the impostor got
	// opens it.
	im.stop()
	_ = stand.Process.Kill()
	d2 := startDaemon(t, bin, home, "AGENTPOOL_LISTEN="+info.Addr)
	d2.stopAtCleanup()
	if out, err := d2.cli("session", "list"); err != nil {
		t.Fatalf("session list once the daemon is back: %v\n%s", err, out)
	}
	secrets := secretsIn(got)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range secrets {
		for _, try := range []func(*http.Request){
			func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+s) },
			func(r *http.Request) { r.Header.Set("Authorization", s) },
		} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, "http://"+info.Addr+"/v1/providers/demo",
				bytes.NewReader([]byte(`{"sandbox":{"enabled":false}}`)))
			req.Header.Set("Content-Type", "application/merge-patch+json")
			try(req)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("PATCH /v1/providers/demo with %q the impostor captured = %d; want 401", s, resp.StatusCode)
			}
		}
	}
	if len(secrets) == 0 {
		t.Log("the impostor captured no string worth trying")
	}
	// And the long-running MCP server finds the daemon again.
	mcpc.call("list_sessions", nil, nil, false)
}
