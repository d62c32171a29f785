package egress

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// fakeUpstream is an HTTP proxy on 127.0.0.1 that serves CONNECT only,
// to the loopback address routes maps each target to, and records the
// targets and credentials it was given.
type fakeUpstream struct {
	ln     net.Listener
	routes map[string]string
	wg     sync.WaitGroup
	mu     sync.Mutex
	seen   []string // "CONNECT target auth"
	conns  []net.Conn
}

func newUpstream(t *testing.T, routes map[string]string) *fakeUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &fakeUpstream{ln: ln, routes: routes}
	u.wg.Add(1)
	go u.serve()
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for _, c := range u.conns {
			c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

func (u *fakeUpstream) serve() {
	defer u.wg.Done()
	for {
		c, err := u.ln.Accept()
		if err != nil {
			return
		}
		u.mu.Lock()
		u.conns = append(u.conns, c)
		u.mu.Unlock()
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			defer c.Close()
			br := bufio.NewReader(c)
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			u.mu.Lock()
			u.seen = append(u.seen, req.Method+" "+req.RequestURI+" "+req.Header.Get("Proxy-Authorization"))
			to, ok := u.routes[req.RequestURI]
			u.mu.Unlock()
			if req.Method != http.MethodConnect || !ok {
				io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
				return
			}
			u.mu.Lock()
			u.conns = append(u.conns, up)
			u.mu.Unlock()
			io.WriteString(c, "HTTP/1.1 200 OK\r\n\r\n")
			splice(c, br, up)
			up.Close()
		}()
	}
}

func (u *fakeUpstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// TestUpstream: with an upstream proxy, tunnels and plain requests go out
// through it with CONNECT to the address the proxy checked, with the
// upstream's credentials; the agent's own Proxy-Authorization never does.
func TestUpstream(t *testing.T) {
	echo, _ := echoServer(t)
	srv := httptest.NewServer(&recorder{})
	defer srv.Close()
	up := newUpstream(t, map[string]string{
		"203.0.113.7:443": echo,
		"203.0.113.8:80":  strings.TrimPrefix(srv.URL, "http://"),
	})
	var asked []string
	var mu sync.Mutex
	e := newEnv(t, map[string]string{"api.example.com": "203.0.113.7", "www.example.com": "203.0.113.8", "evil.example.com": "127.0.0.1"},
		func(c *Config) {
			c.Upstream = func(u *url.URL) (*url.URL, error) {
				mu.Lock()
				asked = append(asked, u.String())
				mu.Unlock()
				return &url.URL{Scheme: "http", User: url.UserPassword("corp", "s3cret"), Host: up.ln.Addr().String()}, nil
			}
		})
	l := e.listen(t, Policy{Mode: ModeAll})

	resp, _, c, br := connectVia(t, l, "api.example.com:443")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT through the upstream = %s; want 200", resp.Status)
	}
	echoes(t, c, br, "via upstream")

	c = dialSocket(t, l)
	io.WriteString(c, "GET http://www.example.com/p HTTP/1.1\r\nHost: www.example.com\r\nProxy-Authorization: Basic YWdlbnQ6eA==\r\n\r\n")
	resp2, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET through the upstream: %v", err)
	}
	body, _ := io.ReadAll(resp2.Body)
	if resp2.StatusCode != 200 || string(body) != "GET /p " {
		t.Errorf("GET through the upstream = %s %q; want 200 %q", resp2.Status, body, "GET /p ")
	}

	if resp, _, _, _ := connectVia(t, l, "evil.example.com:443"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT to a rebinding name through the upstream = %s; want 403 before the upstream", resp.Status)
	}

	auth := "Basic Y29ycDpzM2NyZXQ=" // corp:s3cret
	want := []string{"CONNECT 203.0.113.7:443 " + auth, "CONNECT 203.0.113.8:80 " + auth}
	if got := up.requests(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("upstream got %q; want %q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(asked, " ") != "https://api.example.com:443 http://www.example.com:80" {
		t.Errorf("Upstream asked for %q; want the agent's targets by name", asked)
	}
}

func TestUpstreamRefuses(t *testing.T) {
	up := newUpstream(t, nil)
	e := newEnv(t, map[string]string{"api.example.com": "203.0.113.7"}, func(c *Config) {
		c.Upstream = func(*url.URL) (*url.URL, error) { return &url.URL{Scheme: "http", Host: up.ln.Addr().String()}, nil }
	})
	l := e.listen(t, Policy{Mode: ModeAll})
	resp, body, _, _ := connectVia(t, l, "api.example.com:443")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "502") {
		t.Errorf("CONNECT when the upstream refuses = %s %q; want 502 naming its answer", resp.Status, body)
	}
}
