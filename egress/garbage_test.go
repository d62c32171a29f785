package egress

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMalformed: garbage gets a clear 4xx and the end of the connection.
func TestMalformed(t *testing.T) {
	e := newEnv(t, nil, func(c *Config) { c.HandshakeTimeout = 300 * time.Millisecond })
	l := e.listen(t, Policy{Mode: ModeAll})
	tests := []struct {
		name   string
		send   string
		status int
		body   string
	}{
		{"text", "hello there\r\n\r\n", 400, "malformed request"},
		{"binary", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, "malformed request"},
		{"relative uri", "GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n", 400, "this is a proxy"},
		{"https uri", "GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", 400, "this is a proxy"},
		{"connect without port", "CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", 400, "CONNECT wants host:port"},
		{"connect bad port", "CONNECT example.com:0 HTTP/1.1\r\nHost: example.com\r\n\r\n", 400, "invalid port"},
		{"connect bad host", "CONNECT exa$mple.com:443 HTTP/1.1\r\n\r\n", 400, "invalid host"},
		{"connect zone", "CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n", 400, ""},
		{"huge header", "GET http://example.com/ HTTP/1.1\r\nX-Big: " + strings.Repeat("a", MaxHeaderBytes+10) + "\r\n\r\n", 431, "larger than"},
		{"stalled header", "GET http://example.com/ HTTP/1.1\r\nHost: exam", 408, "not received in time"},
		{"bad chunk", "POST http://127.0.0.2:9/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialSocket(t, l)
			go io.WriteString(c, tt.send) // a huge header may not fit the socket's buffer
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("read response: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.body) || !resp.Close {
				t.Errorf("%q: %s %q (close %v); want %d with %q and the connection closed", tt.name, resp.Status, body, resp.Close, tt.status, tt.body)
			}
		})
	}
}

// TestSilentClient: a client that sends nothing is closed after the
// handshake timeout; one that closes at once leaves nothing behind.
func TestSilentClient(t *testing.T) {
	e := newEnv(t, nil, func(c *Config) { c.HandshakeTimeout = 200 * time.Millisecond })
	l := e.listen(t, Policy{Mode: ModeAll})
	c := dialSocket(t, l)
	start := time.Now()
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("silent client: Read = %d, %v; want EOF", n, err)
	}
	if d := time.Since(start); d > waitLimit/2 {
		t.Errorf("silent client closed after %s; want about 200ms", d)
	}
	dialSocket(t, l).Close()
	c = dialSocket(t, l)
	c.Write([]byte{5}) // a SOCKS5 greeting cut short
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("short SOCKS5 greeting: Read = %d, %v; want EOF", n, err)
	}
}
