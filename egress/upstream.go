package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"
)

// tunnel connects to ap through the HTTP(S) proxy at up with CONNECT,
// naming the checked address so the upstream resolves nothing.
func (p *Proxy) tunnel(ctx context.Context, up *url.URL, ap netip.AddrPort) (_ net.Conn, err error) {
	port := up.Port()
	switch up.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		if port == "" {
			port = "443"
		}
	default:
		return nil, fmt.Errorf("upstream proxy %s: scheme %q is not supported (want http or https)", up.Redacted(), up.Scheme)
	}
	proxyAddr := net.JoinHostPort(up.Hostname(), port)
	c, err := p.cfg.Dialer(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, fmt.Errorf("upstream proxy %s: %w", up.Redacted(), err)
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if up.Scheme == "https" {
		tc := tls.Client(c, &tls.Config{ServerName: up.Hostname()})
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("upstream proxy %s: %w", up.Redacted(), err)
		}
		c = tc
	}
	req := fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n", ap, ap)
	if u := up.User; u != nil {
		pass, _ := u.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pass)) + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		return nil, fmt.Errorf("upstream proxy %s: %w", up.Redacted(), err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return nil, fmt.Errorf("upstream proxy %s: CONNECT %s: %w", up.Redacted(), ap, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("upstream proxy %s: CONNECT %s: %s", up.Redacted(), ap, resp.Status)
	}
	if !stop() {
		return nil, fmt.Errorf("upstream proxy %s: %w", up.Redacted(), context.Cause(ctx))
	}
	if br.Buffered() > 0 {
		return &bufConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// bufConn is a connection whose first bytes were read ahead into r.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

// Read reads what was read ahead, then the connection.
func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// CloseWrite half-closes the connection when it can.
func (c *bufConn) CloseWrite() error { return closeWrite(c.Conn) }
