package egress

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMaxConns: past MaxConns, a new connection is closed at once, and a
// slot frees when a connection ends.
func TestMaxConns(t *testing.T) {
	e := newEnv(t, nil, func(c *Config) { c.MaxConns = 2 })
	l := e.listen(t, Policy{Mode: ModeAll})
	a, b := dialSocket(t, l), dialSocket(t, l)
	waitFor(t, "two connections served", func() bool { return len(l.slots) == 2 })
	c := dialSocket(t, l)
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("third connection: Read = %d, %v; want EOF at once", n, err)
	}
	if s := e.p.Stats(); s.Busy != 1 {
		t.Errorf("Stats().Busy = %d; want 1", s.Busy)
	}
	a.Close()
	b.Write([]byte("x\r\n\r\n"))
	io.ReadAll(b)
	waitFor(t, "slots freed", func() bool { return len(l.slots) == 0 })
	resp, _, _, _ := connectVia(t, l, "127.0.0.1:9")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("after slots freed: CONNECT status = %s; want 403 (served)", resp.Status)
	}
}

// TestCloseEndsTunnels: Proxy.Close ends live tunnels and pending
// handshakes, removes the sockets and leaves no goroutine (TestMain checks).
func TestCloseEndsTunnels(t *testing.T) {
	addr, _ := echoServer(t)
	e := newEnv(t, nil, nil)
	l := e.listen(t, Policy{Mode: ModeList, Hosts: []string{addr}})
	l2 := e.listen(t, Policy{Mode: ModeNone})
	resp, _, tunnel, br := connectVia(t, l, addr)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT status = %s; want 200", resp.Status)
	}
	io.WriteString(tunnel, "ping")
	if got := make([]byte, 4); mustRead(t, br, got) != "ping" {
		t.Fatalf("tunnel does not echo")
	}
	idle := dialSocket(t, l2) // a handshake in progress
	done := make(chan error, 1)
	go func() { done <- e.p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close() error = %v; want nil", err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("Close() did not return")
	}
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("tunnel still open after Close")
	}
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Errorf("pending connection still open after Close")
	}
	for _, p := range []string{l.Path(), l2.Path()} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket %s after Close: %v; want it removed", p, err)
		}
		if entries, _ := os.ReadDir(filepath.Dir(p)); len(entries) != 0 {
			t.Errorf("left in the socket's directory: %v", entries)
		}
	}
	if _, err := e.p.Listen(filepath.Join(t.TempDir(), "s"), Policy{Mode: ModeAll}, Meta{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Listen after Close error = %v; want ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close() error = %v; want nil", err)
	}
}

// TestListenerClose: one listener's Close leaves the others serving.
func TestListenerClose(t *testing.T) {
	e := newEnv(t, nil, nil)
	l1 := e.listen(t, Policy{Mode: ModeNone})
	l2 := e.listen(t, Policy{Mode: ModeNone})
	if err := l1.Close(); err != nil {
		t.Fatalf("Close() error = %v", err)
	}
	if _, err := net.Dial("unix", l1.Path()); err == nil {
		t.Errorf("closed listener still accepts")
	}
	if resp, _, _, _ := connectVia(t, l2, "127.0.0.1:1"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("other listener: status %s; want 403", resp.Status)
	}
}

func TestListenPath(t *testing.T) {
	e := newEnv(t, nil, nil)
	dir := t.TempDir()
	pol := Policy{Mode: ModeAll}

	sock := filepath.Join(dir, "a.sock")
	l, err := e.p.Listen(sock, pol, Meta{})
	if err != nil {
		t.Fatalf("Listen(%s) error = %v", sock, err)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&fs.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %s: %v, %v; want a socket of mode 0600", sock, fi.Mode(), err)
	}
	if _, err := e.p.Listen(sock, pol, Meta{}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Listen on a socket in use: error = %v; want \"in use\"", err)
	}
	l.Close()

	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "stale.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if l, err := e.p.Listen(filepath.Join(dir, "stale.sock"), pol, Meta{}); err != nil {
		t.Errorf("Listen over a stale socket: error = %v; want it replaced", err)
	} else {
		l.Close()
	}

	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("keep me"), 0o600)
	if _, err := e.p.Listen(file, pol, Meta{}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a file: error = %v; want \"not a socket\"", err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(filepath.Join(dir, "elsewhere.sock"), link)
	if _, err := e.p.Listen(link, pol, Meta{}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Listen over a symbolic link: error = %v; want \"symbolic link\"", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "elsewhere.sock")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Listen followed the symbolic link: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Errorf("file replaced: %q", b)
	}
	if _, err := e.p.Listen(filepath.Join(dir, "bad.sock"), Policy{Mode: "ports"}, Meta{}); err == nil {
		t.Errorf("Listen with an invalid policy: error = nil; want one")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustRead(t *testing.T, r io.Reader, b []byte) string {
	t.Helper()
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}
