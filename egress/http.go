package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"time"
)

// hopHeaders are the hop-by-hop headers a proxy never forwards (RFC 9110
// section 7.6.1, and the Proxy- ones of the agent's own hop).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// serveHTTP serves CONNECT (a tunnel, the last request of the connection)
// and absolute-URI requests, each checked on its own, until the agent or
// the target closes, or a request is malformed.
func (s *conn) serveHTTP() {
	for n := 0; ; n++ {
		if n > 0 {
			s.c.SetReadDeadline(time.Now().Add(idleTimeout))
			if _, err := s.br.Peek(1); err != nil {
				return
			}
			s.c.SetDeadline(time.Now().Add(s.l.p.cfg.HandshakeTimeout))
		}
		s.lr.N = MaxHeaderBytes - int64(s.br.Buffered())
		req, err := http.ReadRequest(s.br)
		if err != nil {
			switch {
			case n > 0 && errors.Is(err, io.EOF):
			case s.lr.N <= 0:
				s.reply(http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("agentpool egress: request header larger than %d bytes", MaxHeaderBytes))
			case timeout(err):
				s.reply(http.StatusRequestTimeout, "agentpool egress: request header not received in time")
			default:
				s.reply(http.StatusBadRequest, "agentpool egress: malformed request: "+firstLine(err.Error()))
			}
			return
		}
		s.unlimit()
		if req.Method == http.MethodConnect {
			s.connect(req)
			return
		}
		if !s.forward(req) {
			return
		}
	}
}

// reply writes a short response with a one-line body and ends the
// connection.
func (s *conn) reply(code int, line string) {
	body := line + "\n"
	s.c.SetWriteDeadline(time.Now().Add(s.l.p.cfg.HandshakeTimeout))
	fmt.Fprintf(s.c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// replyKeep writes a short response with a one-line body and keeps the
// connection.
func (s *conn) replyKeep(code int, line string) {
	body := line + "\n"
	s.c.SetWriteDeadline(time.Now().Add(s.l.p.cfg.HandshakeTimeout))
	fmt.Fprintf(s.c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
	s.c.SetWriteDeadline(time.Time{})
}

// dialFailed returns the status that answers a failed resolution or dial.
func dialFailed(err error) int {
	if timeout(err) {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// connect serves a CONNECT request: a tunnel to the target.
func (s *conn) connect(req *http.Request) {
	host, port, err := net.SplitHostPort(req.RequestURI)
	if err != nil {
		s.reply(http.StatusBadRequest, fmt.Sprintf("agentpool egress: CONNECT wants host:port, got %q", req.RequestURI))
		return
	}
	t, err := parseTarget(host, port)
	if err != nil {
		s.reply(http.StatusBadRequest, "agentpool egress: CONNECT "+req.RequestURI+": "+err.Error())
		return
	}
	up, ref, err := s.open(t, "https", "connect")
	switch {
	case ref != nil:
		s.reply(http.StatusForbidden, ref.String())
		return
	case err != nil:
		s.reply(dialFailed(err), fmt.Sprintf("agentpool egress: %s: %s", t, firstLine(err.Error())))
		return
	}
	defer s.l.release(up)
	s.c.SetWriteDeadline(time.Now().Add(s.l.p.cfg.HandshakeTimeout))
	if _, err := io.WriteString(s.c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	s.unlimit()
	splice(s.c, s.br, up)
}

// forward serves one absolute-URI request and reports whether the
// connection may carry the next one.
func (s *conn) forward(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		s.reply(http.StatusBadRequest, fmt.Sprintf("agentpool egress: this is a proxy: send an absolute http:// URI or CONNECT host:port, not %q", req.RequestURI))
		return false
	}
	port := req.URL.Port()
	if port == "" {
		port = "80"
	}
	t, err := parseTarget(req.URL.Hostname(), port)
	if err != nil {
		s.reply(http.StatusBadRequest, "agentpool egress: "+req.URL.Host+": "+err.Error())
		return false
	}
	bodyless := req.ContentLength == 0 && len(req.TransferEncoding) == 0
	up, ref, err := s.open(t, "http", "http")
	switch {
	case ref != nil && bodyless && !req.Close:
		s.replyKeep(http.StatusForbidden, ref.String())
		return true
	case ref != nil:
		s.reply(http.StatusForbidden, ref.String())
		return false
	case err != nil:
		s.reply(dialFailed(err), fmt.Sprintf("agentpool egress: %s: %s", t, firstLine(err.Error())))
		return false
	}
	defer s.l.release(up)
	stripHop(req.Header)
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", "") // no Go default in its place
	}
	if req.Header.Get("Expect") != "" {
		// The target never sees the agent's Expect: answer it here, so the
		// agent sends its body.
		req.Header.Del("Expect")
		if _, err := io.WriteString(s.c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return false
		}
	}
	if err := req.Write(up); err != nil {
		s.reply(http.StatusBadGateway, fmt.Sprintf("agentpool egress: %s: %s", t, firstLine(err.Error())))
		return false
	}
	ur := bufio.NewReader(up)
	for {
		resp, err := http.ReadResponse(ur, req)
		if err != nil {
			s.reply(http.StatusBadGateway, fmt.Sprintf("agentpool egress: %s: %s", t, firstLine(err.Error())))
			return false
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			resp.Body.Close()
			s.reply(http.StatusBadGateway, fmt.Sprintf("agentpool egress: %s switched protocols, which plain proxying does not carry (use CONNECT)", t))
			return false
		}
		stripHop(resp.Header)
		resp.Close = resp.Close || req.Close
		err = resp.Write(s.c)
		resp.Body.Close()
		if err != nil {
			return false
		}
		if resp.StatusCode >= 200 {
			// resp.Write closes a response of unknown length, whose end is
			// the end of the connection.
			unknown := resp.ContentLength < 0 && !chunked(resp.TransferEncoding) && req.Method != http.MethodHead
			return !resp.Close && !unknown
		}
	}
}

// stripHop removes the hop-by-hop headers from h, those the Connection
// header names included.
func stripHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// chunked reports whether te ends in the chunked coding.
func chunked(te []string) bool { return len(te) > 0 && te[len(te)-1] == "chunked" }

// firstLine returns s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
