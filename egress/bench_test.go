package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkProxiedTLS measures what the proxy adds to a connection: each
// op is a fresh TCP connection, a full TLS handshake and one GET to a TLS
// server on 127.0.0.1, directly and through a Listener (CONNECT on its unix
// socket). The proxied run reports the difference and the ratio to the
// direct one run just before it.
func BenchmarkProxiedTLS(b *testing.B) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs

	p, err := New(Config{Logger: slog.New(slog.DiscardHandler), Upstream: noUpstream})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	l, err := p.Listen(filepath.Join(b.TempDir(), "e.sock"), Policy{Mode: ModeList, Hosts: []string{host}}, Meta{})
	if err != nil {
		b.Fatal(err)
	}

	get := func(c net.Conn, br *bufio.Reader) error {
		// A new tls.Config each time: no session resumption.
		tc := tls.Client(&readerConn{Conn: c, r: br}, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		defer tc.Close()
		if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || string(body) != "ok" {
			return fmt.Errorf("body %q, %v", body, err)
		}
		return nil
	}
	var direct time.Duration
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			c, err := net.Dial("tcp", host)
			if err != nil {
				b.Fatal(err)
			}
			if err := get(c, nil); err != nil {
				b.Fatal(err)
			}
		}
		direct = b.Elapsed() / time.Duration(b.N)
	})
	b.Run("proxied", func(b *testing.B) {
		for b.Loop() {
			c, err := net.Dial("unix", l.Path())
			if err != nil {
				b.Fatal(err)
			}
			io.WriteString(c, "CONNECT "+host+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("CONNECT: %v %v", resp, err)
			}
			if err := get(c, br); err != nil {
				b.Fatal(err)
			}
		}
		if proxied := b.Elapsed() / time.Duration(b.N); direct > 0 {
			b.ReportMetric(float64(proxied-direct)/1e6, "added-ms/op")
			b.ReportMetric(float64(proxied)/float64(direct), "x-direct")
		}
	})
}

// noUpstream connects directly.
func noUpstream(*url.URL) (*url.URL, error) { return nil, nil }

// readerConn reads what r holds of c first.
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *readerConn) Read(p []byte) (int, error) {
	if c.r != nil {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}
