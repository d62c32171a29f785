package egress

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestConnectAllowedLoopbackEntry(t *testing.T) {
	addr, _ := echoServer(t)
	e := newEnv(t, nil, nil)
	l := e.listen(t, Policy{Mode: ModeAll, Hosts: []string{addr}})
	resp, _, c, br := connectVia(t, l, addr)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s status = %s; want 200", addr, resp.Status)
	}
	echoes(t, c, br, "hello through the tunnel")
	if s := e.p.Stats(); s.Allowed != 1 || s.Refused != 0 {
		t.Errorf("Stats() = %+v; want 1 allowed, 0 refused", s)
	}
}

func TestConnectRefusedLoopback(t *testing.T) {
	addr, port := echoServer(t)
	e := newEnv(t, nil, nil)
	l := e.listen(t, Policy{Mode: ModeAll})
	resp, body, _, _ := connectVia(t, l, addr)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT %s status = %s; want 403", addr, resp.Status)
	}
	for _, want := range []string{addr, "loopback", `"` + addr + `"`, "sandbox.network"} {
		if !strings.Contains(body, want) {
			t.Errorf("403 body = %q; want it to name %q", body, want)
		}
	}
	if strings.Count(strings.TrimSpace(body), "\n") != 0 {
		t.Errorf("403 body = %q; want one line", body)
	}
	refs := e.refused()
	want := Refusal{Meta: Meta{Session: "s-1", Provider: "codex"}, Host: "127.0.0.1", Port: port, Addr: "127.0.0.1",
		Reason: "127.0.0.1 is a loopback address", Allow: addr}
	if len(refs) != 1 || refs[0] != want {
		t.Errorf("refusals = %+v; want [%+v]", refs, want)
	}
	if s := e.p.Stats(); s.Allowed != 0 || s.Refused != 1 {
		t.Errorf("Stats() = %+v; want 0 allowed, 1 refused", s)
	}
	if d := e.dial.history(); len(d) != 0 {
		t.Errorf("dialed %v; want nothing", d)
	}
}

// TestConnectRebinding: a name resolving to loopback or a private address
// is refused under "all" and under an entry naming it, and nothing is
// dialed.
func TestConnectRebinding(t *testing.T) {
	names := map[string]string{"evil.example.com": "127.0.0.1", "intra.example.com": "10.1.2.3"}
	for _, pol := range []Policy{
		{Mode: ModeAll},
		{Mode: ModeList, Hosts: []string{"evil.example.com", "*.example.com:443"}},
	} {
		e := newEnv(t, names, nil)
		l := e.listen(t, pol)
		for host, addr := range map[string]string{"evil.example.com": "127.0.0.1", "intra.example.com": "10.1.2.3"} {
			resp, body, _, _ := connectVia(t, l, host+":443")
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "resolves to "+addr) || !strings.Contains(body, `"`+addr+`:443"`) {
				t.Errorf("%+v: CONNECT %s:443 = %s %q; want 403 naming %s and the entry %s:443", pol, host, resp.Status, body, addr, addr)
			}
		}
		if d := e.dial.history(); len(d) != 0 {
			t.Errorf("%+v: dialed %v; want nothing", pol, d)
		}
	}
}

// TestConnectPublicName: an allowed name is dialed at the address the
// proxy resolved and checked, never by name.
func TestConnectPublicName(t *testing.T) {
	addr, _ := echoServer(t)
	e := newEnv(t, map[string]string{"api.example.com": "203.0.113.7", "www.example.com": "203.0.113.8"}, nil)
	e.dial.route("203.0.113.7:443", addr)
	l := e.listen(t, Policy{Mode: ModeList, Hosts: []string{"*.example.com:443"}})
	resp, _, c, br := connectVia(t, l, "api.example.com:443")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT api.example.com:443 status = %s; want 200", resp.Status)
	}
	echoes(t, c, br, "ping")
	resp, body, _, _ := connectVia(t, l, "www.example.com:80")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `"www.example.com:80"`) {
		t.Errorf("CONNECT www.example.com:80 = %s %q; want 403 suggesting \"www.example.com:80\"", resp.Status, body)
	}
	if d := e.dial.history(); len(d) != 1 || d[0] != "203.0.113.7:443" {
		t.Errorf("dialed %v; want [203.0.113.7:443]", d)
	}
}

func TestConnectNone(t *testing.T) {
	e := newEnv(t, map[string]string{"api.example.com": "203.0.113.7"}, nil)
	l := e.listen(t, Policy{Mode: ModeNone})
	resp, body, _, _ := connectVia(t, l, "api.example.com:443")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `"none"`) {
		t.Errorf("CONNECT under none = %s %q; want 403", resp.Status, body)
	}
	if q := e.res.asked(); len(q) != 0 {
		t.Errorf("resolver asked %v under none; want nothing", q)
	}
}

func TestConnectListPorts(t *testing.T) {
	addr, _ := echoServer(t)
	e := newEnv(t, map[string]string{"api.example.com": "203.0.113.7"}, nil)
	e.dial.route("203.0.113.7:443", addr)
	l := e.listen(t, Policy{Mode: ModeList, Ports: []uint16{443}})
	if resp, _, _, _ := connectVia(t, l, "api.example.com:443"); resp.StatusCode != http.StatusOK {
		t.Errorf("CONNECT api.example.com:443 status = %s; want 200", resp.Status)
	}
	if resp, _, _, _ := connectVia(t, l, "api.example.com:22"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT api.example.com:22 status = %s; want 403", resp.Status)
	}
	if resp, _, _, _ := connectVia(t, l, addr); resp.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT %s status = %s; want 403 (loopback needs an entry)", addr, resp.Status)
	}
}

// TestConnectDenyDaemon: the daemon's own port is refused even under an
// entry for all of loopback, and allowed by one naming it exactly.
func TestConnectDenyDaemon(t *testing.T) {
	addr, port := echoServer(t)
	e := newEnv(t, nil, func(c *Config) { c.Deny = append(c.Deny, mustAddrPort(addr)) })
	l := e.listen(t, Policy{Mode: ModeAll, Hosts: []string{"127.0.0.0/8", "localhost"}})
	resp, body, _, _ := connectVia(t, l, addr)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "daemon's own address") {
		t.Fatalf("CONNECT %s = %s %q; want 403 naming the daemon's address", addr, resp.Status, body)
	}
	if err := l.SetPolicy(Policy{Mode: ModeList, Hosts: []string{"localhost:" + itoa(port)}}); err != nil {
		t.Fatalf("SetPolicy() error = %v", err)
	}
	resp, _, c, br := connectVia(t, l, addr)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s under an exact entry = %s; want 200", addr, resp.Status)
	}
	echoes(t, c, br, "x")
}

// TestConnectHalfClose: the target's answer after the agent half-closed
// still arrives.
func TestConnectHalfClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		got, _ := io.ReadAll(c) // until the agent's half-close
		io.WriteString(c, "got "+string(got))
	}()
	e := newEnv(t, nil, nil)
	l := e.listen(t, Policy{Mode: ModeList, Hosts: []string{ln.Addr().String()}})
	resp, _, c, br := connectVia(t, l, ln.Addr().String())
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT status = %s; want 200", resp.Status)
	}
	io.WriteString(c, "question")
	c.(*net.UnixConn).CloseWrite()
	got, err := io.ReadAll(br)
	if string(got) != "got question" || err != nil {
		t.Errorf("answer after half-close = %q, %v; want %q", got, err, "got question")
	}
	<-done
}

func TestSetPolicy(t *testing.T) {
	addr, _ := echoServer(t)
	e := newEnv(t, nil, nil)
	l := e.listen(t, Policy{Mode: ModeList, Hosts: []string{addr}})
	if err := l.SetPolicy(Policy{Mode: "ports"}); err == nil {
		t.Errorf("SetPolicy(mode ports) error = nil; want one")
	}
	if resp, _, _, _ := connectVia(t, l, addr); resp.StatusCode != http.StatusOK {
		t.Errorf("after a refused SetPolicy: CONNECT status = %s; want 200 (old policy kept)", resp.Status)
	}
	if err := l.SetPolicy(Policy{Mode: ModeNone}); err != nil {
		t.Fatalf("SetPolicy(none) error = %v", err)
	}
	if resp, _, _, _ := connectVia(t, l, addr); resp.StatusCode != http.StatusForbidden {
		t.Errorf("after SetPolicy(none): CONNECT status = %s; want 403", resp.Status)
	}
}
