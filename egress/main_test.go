package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait in these tests; reaching it is a failure,
// not a measurement.
const waitLimit = 10 * time.Second

// fakeResolver answers from a table; a name it lacks does not exist.
type fakeResolver struct {
	mu      sync.Mutex
	table   map[string][]netip.Addr
	queries []string
}

func newResolver(table map[string]string) *fakeResolver {
	r := &fakeResolver{table: map[string][]netip.Addr{}}
	for name, addrs := range table {
		for _, a := range strings.Fields(addrs) {
			r.table[name] = append(r.table[name], netip.MustParseAddr(a))
		}
	}
	return r
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queries = append(r.queries, host)
	if a, ok := r.table[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.queries...)
}

// fakeDialer connects to 127.0.0.1 as asked, and to the fake addresses of
// routes through the 127.0.0.1 address they map to; it refuses every other
// address, so no test reaches beyond loopback.
type fakeDialer struct {
	mu     sync.Mutex
	routes map[string]string
	dialed []string
}

func (d *fakeDialer) route(from, to string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.routes == nil {
		d.routes = map[string]string{}
	}
	d.routes[from] = to
}

func (d *fakeDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	to, ok := d.routes[addr]
	d.mu.Unlock()
	if !ok {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || ap.Addr() != netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
			return nil, fmt.Errorf("test dialer: no route to %s", addr)
		}
		to = addr
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, to)
}

func (d *fakeDialer) history() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

// env is a Proxy with a fake resolver and dialer, and the refusals it
// reported.
type env struct {
	p        *Proxy
	res      *fakeResolver
	dial     *fakeDialer
	mu       sync.Mutex
	refusals []Refusal
}

func newEnv(t *testing.T, names map[string]string, change func(*Config)) *env {
	t.Helper()
	e := &env{res: newResolver(names), dial: &fakeDialer{}}
	cfg := Config{
		Resolver:  e.res,
		Dialer:    e.dial.dial,
		Upstream:  func(*url.URL) (*url.URL, error) { return nil, nil },
		OnRefused: func(r Refusal) { e.mu.Lock(); e.refusals = append(e.refusals, r); e.mu.Unlock() },
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	if change != nil {
		change(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New() error = %v; want nil", err)
	}
	t.Cleanup(func() { p.Close() })
	e.p = p
	return e
}

func (e *env) refused() []Refusal {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Refusal(nil), e.refusals...)
}

// listen serves pol on a socket in a new temporary directory.
func (e *env) listen(t *testing.T, pol Policy) *Listener {
	t.Helper()
	l, err := e.p.Listen(filepath.Join(t.TempDir(), "e.sock"), pol, Meta{Session: "s-1", Provider: "codex"})
	if err != nil {
		t.Fatalf("Listen() error = %v; want nil", err)
	}
	return l
}

// dialSocket connects to a listener's socket.
func dialSocket(t *testing.T, l *Listener) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("unix", l.Path(), waitLimit)
	if err != nil {
		t.Fatalf("dial %s: %v", l.Path(), err)
	}
	c.SetDeadline(time.Now().Add(waitLimit))
	t.Cleanup(func() { c.Close() })
	return c
}

// connectVia sends CONNECT target through l and returns the response and
// the connection (the tunnel when the status is 200).
func connectVia(t *testing.T, l *Listener, target string) (*http.Response, string, net.Conn, *bufio.Reader) {
	t.Helper()
	c := dialSocket(t, l)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic eDp5\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: read response: %v", target, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, "", c, br // the body is the tunnel
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body), c, br
}

// socksVia makes a SOCKS5 CONNECT (or another command) through l to a
// destination of address type atyp and returns the reply code.
func socksVia(t *testing.T, l *Listener, cmd, atyp byte, host string, port uint16) (byte, net.Conn) {
	t.Helper()
	c := dialSocket(t, l)
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		t.Fatalf("SOCKS5 greeting: %v", err)
	}
	var sel [2]byte
	if _, err := io.ReadFull(c, sel[:]); err != nil || sel != [2]byte{5, 0} {
		t.Fatalf("SOCKS5 method selection = %v, %v; want [5 0]", sel, err)
	}
	req := []byte{5, cmd, 0, atyp}
	switch atyp {
	case 1, 4:
		req = append(req, netip.MustParseAddr(host).AsSlice()...)
	case 3:
		req = append(req, byte(len(host)))
		req = append(req, host...)
	}
	req = binary.BigEndian.AppendUint16(req, port)
	if _, err := c.Write(req); err != nil {
		t.Fatalf("SOCKS5 request: %v", err)
	}
	var head [4]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		t.Fatalf("SOCKS5 reply: %v", err)
	}
	n := 4
	if head[3] == 4 {
		n = 16
	}
	rest := make([]byte, n+2)
	if _, err := io.ReadFull(c, rest); err != nil {
		t.Fatalf("SOCKS5 reply address: %v", err)
	}
	return head[1], c
}

// echoServer serves on 127.0.0.1: it copies what it reads back and
// half-closes when the client does.
func echoServer(t *testing.T) (string, uint16) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	ap := netip.MustParseAddrPort(ln.Addr().String())
	return ap.String(), ap.Port()
}

// echoes writes msg on c, half-closes, and checks that msg comes back
// followed by the end of the stream.
func echoes(t *testing.T, c net.Conn, r io.Reader, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write through the tunnel: %v", err)
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	got, err := io.ReadAll(r)
	if err != nil || string(got) != msg {
		t.Fatalf("read through the tunnel = %q, %v; want %q then EOF", got, err, msg)
	}
}

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func itoa(p uint16) string { return fmt.Sprint(p) }

// unixDialer returns a DialContext that reaches path whatever it is asked.
func unixDialer(path string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
}
