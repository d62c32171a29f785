package postgres

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRebind: SQLite's placeholders become PostgreSQL's; quoted text and
// comments keep theirs.
func TestRebind(t *testing.T) {
	tests := []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = $1 AND c = $2"},
		{"VALUES (?1, ?2, (SELECT x FROM t WHERE s = ?2), ?3)", "VALUES ($1, $2, (SELECT x FROM t WHERE s = $2), $3)"},
		{"SELECT '?' , \"a?\" FROM t WHERE x = ? -- why?\nAND y = ?", "SELECT '?' , \"a?\" FROM t WHERE x = $1 -- why?\nAND y = $2"},
		{"unnest(?::text[], ?::bigint[])", "unnest($1::text[], $2::bigint[])"},
	}
	for _, tt := range tests {
		if got := Rebind(tt.in); got != tt.want {
			t.Errorf("Rebind(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestPasswordFile: a file only its owner may read gives its first line;
// one that group or others may read is refused.
func TestPasswordFile(t *testing.T) {
	dir := t.TempDir()
	tight := filepath.Join(dir, "tight")
	if err := os.WriteFile(tight, []byte("secret\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pw, err := ReadPasswordFile(tight); err != nil || pw != "secret" {
		t.Errorf("ReadPasswordFile(0600) = %q, %v; want secret", pw, err)
	}
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("secret\n"), 0o604); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPasswordFile(loose); err == nil {
		t.Error("ReadPasswordFile(0604) error = nil; want a refusal")
	}
}

// TestEndedOrSpoke: a connection idle with nothing to read passes; one
// whose peer sent bytes, or closed it, does not; the look reads nothing.
func TestEndedOrSpoke(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pair := func() (net.Conn, net.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		p, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); p.Close() })
		return c, p
	}
	waitFor := func(c net.Conn, want bool, what string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); endedOrSpoke(c) != want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: endedOrSpoke = %v; want %v", what, !want, want)
			}
		}
	}
	c, p := pair()
	if endedOrSpoke(c) {
		t.Error("an idle connection with nothing to read was taken for ended")
	}
	if _, err := p.Write([]byte("E")); err != nil {
		t.Fatal(err)
	}
	waitFor(c, true, "the peer sent a byte")
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c, buf); err != nil || buf[0] != 'E' {
		t.Errorf("the byte looked at was consumed: read %q, %v", buf, err)
	}
	waitFor(c, false, "the byte read")
	c2, p2 := pair()
	p2.Close()
	waitFor(c2, true, "the peer closed")
	// A reader parked on the socket (pgx's background reader) holds its
	// read lock: the look does not wait for it.
	c3, p3 := pair()
	go func() { _, _ = c3.Read(make([]byte, 1)) }()
	time.Sleep(20 * time.Millisecond)
	looked := make(chan bool, 1)
	go func() { looked <- endedOrSpoke(c3) }()
	select {
	case bad := <-looked:
		if bad {
			t.Error("an idle connection with a reader parked on it was taken for ended")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the look waited for the reader parked on the socket")
	}
	p3.Close()
	if endedOrSpoke(&net.UnixConn{}) {
		t.Error("a connection whose socket cannot be looked at was taken for ended")
	}
}
