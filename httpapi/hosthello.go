package httpapi

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// A forward goes only to a host whose identity was checked: before the
// forwarder uses a new connection, it sends on it, by hand,
// GET /v1/cluster/hello?nonce=N&host=ID, and the host at the other end
// must answer the proof hostHelloProof(N, ID), which only a holder of the
// cluster key can make, and only for its own id. Then the connection
// serves forwarded requests as any keep-alive connection does. A program
// that took a dead host's port gets a hello, which tells it nothing, and
// no request.

// hostHelloPath is the hello endpoint; it is public (see hello).
const hostHelloPath = "/v1/cluster/hello"

// Bounds of a hello.
const (
	// hostHelloNonceBytes is the entropy of a hello's nonce.
	hostHelloNonceBytes = 32
	// hostHelloTimeout bounds a hello, its answer included.
	hostHelloTimeout = 10 * time.Second
	// maxHostHelloAnswer bounds the answer to a hello.
	maxHostHelloAnswer = 16 << 10
)

// CodeWrongHost (409): a hello asked for another host than the one that
// answers it.
const CodeWrongHost = "wrong_host"

// HelloAnswer is the answer of GET /v1/cluster/hello: the host's id and
// its proof, in hex.
type HelloAnswer struct {
	Host  string `json:"host"`
	Proof string `json:"proof"`
}

// hostHelloProof is the proof of host for nonce (hex) under the hello key.
func hostHelloProof(key []byte, nonce, host string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(hostHelloDomain + "\x00" + nonce + "\x00" + host))
	return m.Sum(nil)
}

// hello: GET /v1/cluster/hello?nonce=N&host=ID → 200 HelloAnswer proving
// this host is ID, 409 wrong_host saying which host it is if another, 404
// without a cluster. Public and cheap (one HMAC); its proof is made with
// a key and over a message of their own, so it signs no request.
func (s *Server) hostHello(w http.ResponseWriter, r *http.Request) error {
	if s.keys.hello == nil {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "this daemon shares its store with no other host"}
	}
	q := r.URL.Query()
	nonce, want := q.Get("nonce"), q.Get("host")
	if b, err := hex.DecodeString(nonce); err != nil || len(b) != hostHelloNonceBytes {
		return badRequest("nonce", "nonce must be %d random bytes in hex", hostHelloNonceBytes)
	}
	self := s.selfHost()
	if want != self {
		return &Error{Status: http.StatusConflict, Code: CodeWrongHost, Field: "host",
			Message: fmt.Sprintf("this is host %q, not host %q", self, want)}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, HelloAnswer{Host: self, Proof: hex.EncodeToString(hostHelloProof(s.keys.hello, nonce, self))})
	return nil
}

// hostHelloError says that the host at an address did not prove it is the
// host expected there; the forward is answered 503 host_unreachable.
type hostHelloError struct {
	host, addr string
	err        error
}

func (e *hostHelloError) Error() string {
	return fmt.Sprintf("the host at %s could not prove it is host %q (its port may have been taken by another program): %v", e.addr, e.host, e.err)
}

func (e *hostHelloError) Unwrap() error { return e.err }

// Is makes a hostHelloError match ErrHostProof.
func (e *hostHelloError) Is(target error) bool { return target == ErrHostProof }

// ErrHostProof is matched (errors.Is) by the error of CheckHost when the
// host answered but did not prove it is the host expected.
var ErrHostProof = errors.New("the host did not prove who it is")

// CheckHost asks h, at its advertised address, to prove that it is h and
// holds this host's cluster key: the hello that begins every connection
// a forward uses (nothing else is sent, and no key crosses the wire). It
// returns nil when h does, an error matching ErrHostProof when something
// answered at that address without the proof, another when nothing did
// (or without a cluster).
func (s *Server) CheckHost(ctx context.Context, h ClusterHost) error {
	if s.fwd == nil {
		return errors.New("this daemon shares its store with no other host")
	}
	u, err := url.Parse(h.Advertise)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("host %q has no usable address (%q)", h.ID, h.Advertise)
	}
	addr, conf := u.Host, (*tls.Config)(nil)
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	if u.Scheme == "https" {
		conf = hostTLS(s.cfg.ClusterTLS, addr)
	}
	ctx = context.WithValue(ctx, forwardKey{}, forwardTarget{host: h, url: u})
	conn, err := s.dialHost(ctx, s.fwd.dialer, "tcp", addr, conf)
	if err != nil {
		return err
	}
	return conn.Close()
}

// sayHostHello asks the host at the other end of conn (addr, for the Host
// header) to prove, with key, that it is host, within hostHelloTimeout. It
// leaves conn as it found it, ready for the requests that follow.
func sayHostHello(ctx context.Context, conn net.Conn, addr, host string, key []byte) error {
	if key == nil {
		return errors.New("this host has no cluster key to check its proof with")
	}
	nb := make([]byte, hostHelloNonceBytes)
	_, _ = rand.Read(nb) // never fails (crypto/rand)
	nonce := hex.EncodeToString(nb)
	deadline := time.Now().Add(hostHelloTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	q := url.Values{"nonce": {nonce}, "host": {host}}
	req := "GET " + hostHelloPath + "?" + q.Encode() + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: agentpool-hello\r\nAccept: application/json\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	br := bufio.NewReader(io.LimitReader(conn, maxHostHelloAnswer))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fmt.Errorf("read the answer to hello: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read the answer to hello: %w", err)
	}
	if br.Buffered() > 0 || resp.Close {
		return errors.New("its answer to hello is not that of an agentpool host (more than an answer, or a closed connection)")
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusConflict:
		var eb struct{ Error *Error }
		if json.Unmarshal(body, &eb) == nil && eb.Error != nil && eb.Error.Code == CodeWrongHost {
			return fmt.Errorf("it says: %s", eb.Error.Message)
		}
		fallthrough
	default:
		return fmt.Errorf("it answered hello %s", resp.Status)
	}
	var a HelloAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return fmt.Errorf("its answer to hello is not a proof: %w", err)
	}
	proof, err := hex.DecodeString(a.Proof)
	if err != nil || a.Host != host || !hmac.Equal(proof, hostHelloProof(key, nonce, host)) {
		return errors.New("its proof is wrong: it does not hold this cluster's key (started with a different --cluster-key-file?)")
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	return nil
}

// dialHost returns a connection to addr for the transport, over TLS if
// tlsConf is set, on which the host the request's forwardTarget names
// has proved itself (sayHostHello); a failed proof is logged.
func (s *Server) dialHost(ctx context.Context, d *net.Dialer, network, addr string, tlsConf *tls.Config) (net.Conn, error) {
	t, ok := ctx.Value(forwardKey{}).(forwardTarget)
	if !ok {
		return nil, fmt.Errorf("dial %s: no host is expected there", addr)
	}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if tlsConf != nil {
		tc := tls.Client(conn, tlsConf)
		hctx, cancel := context.WithTimeout(ctx, forwardDialTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = conn.Close()
			return nil, err
		}
		conn = tc
	}
	if err := sayHostHello(ctx, conn, addr, t.host.ID, s.keys.hello); err != nil {
		_ = conn.Close()
		he := &hostHelloError{host: t.host.ID, addr: addr, err: err}
		s.log.Warn("a host did not prove who it is: nothing is forwarded to it", "host", t.host.ID, "addr", addr, logKeyErr, err)
		return nil, he
	}
	return conn, nil
}

// hostTLS is the client TLS config of host-to-host connections to addr:
// base's (nil: the system's roots), HTTP/1.1 only (the hello is one).
func hostTLS(base *tls.Config, addr string) *tls.Config {
	c := base.Clone()
	if c == nil {
		c = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if c.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		c.ServerName = strings.Trim(host, "[]")
	}
	c.NextProtos = []string{"http/1.1"}
	return c
}
