package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Bounds of the connections to other hosts.
const (
	// forwardDialTimeout bounds connecting to another host.
	forwardDialTimeout = 10 * time.Second
	// forwardIdleConns is how many idle connections to each host are kept.
	forwardIdleConns = 32
	// forwardIdleTimeout closes an idle connection to another host.
	forwardIdleTimeout = 90 * time.Second
)

// forwarder sends requests about sessions other hosts own to them: a
// reverse proxy that streams as it reads (FlushInterval -1, so an event
// stream through it is the owner's, byte for byte, as it comes) and passes
// WebSocket upgrades through.
type forwarder struct {
	proxy     *httputil.ReverseProxy
	transport *http.Transport
	dialer    *net.Dialer
}

// forwardKey is the request context key of a forwarded request's target.
type forwardKey struct{}

// forwardTarget is the host a request is forwarded to, and the SHA-256
// of the request's body, which the forwarder signs.
type forwardTarget struct {
	host ClusterHost
	url  *url.URL
	body [sha256.Size]byte
}

// newForwarder returns the forwarder of s, whose host-to-host calls use
// tlsConf (nil: the system's roots).
func newForwarder(s *Server, tlsConf *tls.Config) *forwarder {
	// Every new connection is proved before use (hosthello.go): the dial
	// functions connect, add TLS for https, and say hello.
	d := &net.Dialer{Timeout: forwardDialTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return s.dialHost(ctx, d, network, addr, nil)
		},
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return s.dialHost(ctx, d, network, addr, hostTLS(tlsConf, addr))
		},
		MaxIdleConnsPerHost:   forwardIdleConns,
		IdleConnTimeout:       forwardIdleTimeout,
		ExpectContinueTimeout: time.Second,
	}
	return &forwarder{transport: tr, dialer: d, proxy: &httputil.ReverseProxy{
		Rewrite:       s.rewriteForward,
		Transport:     tr,
		FlushInterval: -1,
		ErrorHandler:  s.forwardError,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}}
}

// sessionParam returns the name of the path parameter of pattern that
// holds the session a request is about, or "" for a route that is not
// about one session. The attach ticket is not: it is a credential of the
// host the page talks to, which checks it and forwards the attach itself.
func sessionParam(pattern string) string {
	_, path, _ := strings.Cut(pattern, " ")
	switch {
	case path == "/v1/sessions/{id}/attach-ticket":
		return ""
	case path == "/v1/sessions/{id}" || strings.HasPrefix(path, "/v1/sessions/{id}/"):
		return "id"
	case strings.HasPrefix(path, "/v1/pool/{session}/"):
		return "session"
	}
	return ""
}

// forwardSession forwards r, an authenticated request about session, to
// the session's owner when that is another host. handled says it was
// answered, or that err is the answer: a forwarded request that reached a
// host that no longer owns the session is refused (session_moved), never
// forwarded again. Without a cluster nothing is forwarded.
func (s *Server) forwardSession(w http.ResponseWriter, r *http.Request, session string) (handled bool, err error) {
	if s.cfg.Cluster == nil {
		return false, nil
	}
	owner, self, err := s.cfg.Cluster.Owner(r.Context(), session)
	if err != nil {
		return true, fmt.Errorf("owner of session %q: %w", session, err)
	}
	if self {
		return false, nil
	}
	if principalOf(r).host != "" {
		return true, sessionMoved(session, owner)
	}
	return true, s.forward(w, r, session, owner)
}

// forward sends r to host and copies its answer back; the request may
// last (a stream, a wait, a terminal) until it ends or Shutdown. A host
// that cannot be reached is answered 503 naming it (see forwardError).
//
// The forward is watched while it lasts (see watchOwner): a host that
// stops answering without closing its connections (frozen, or cut off)
// loses the session once its lease expires, and when another host has
// taken it over the forward is cut. A client still waiting for an answer
// gets session_moved, which it sends again to reach the new owner; a
// stream simply ends, and its reader resumes after the last event it got.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, session string, host ClusterHost) error {
	u, err := url.Parse(host.Advertise)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeHostUnreachable, RetryAfter: retryAfterMoving,
			Message: fmt.Sprintf("host %q has no usable address (%q)", host.ID, host.Advertise)}
	}
	// The body is signed, so read in full first (within MaxBody: a larger
	// one is refused 413 here); the route's adapter has usually read it.
	if err := s.bufferBody(w, r); err != nil {
		return err
	}
	if err := s.holdStream(); err != nil {
		return err
	}
	defer s.streams.Done()
	ctx, cancel := s.longContext(r)
	defer cancel()
	ctx, cut := context.WithCancel(ctx)
	defer cut()
	ctx = context.WithValue(ctx, forwardKey{}, forwardTarget{host: host, url: u, body: sha256.Sum256(bodyBytes(r))})
	aw := &answerWatch{ResponseWriter: w}
	done := make(chan struct{})
	moved := make(chan ClusterHost, 1)
	if session != "" { // a create placed on host has no owner to watch
		go s.watchOwner(ctx, session, host, done, moved, cut)
	}
	s.fwd.proxy.ServeHTTP(aw, r.WithContext(ctx))
	close(done)
	select {
	case now := <-moved:
		if !aw.started.Load() {
			return sessionMoved(session, now)
		}
	default:
	}
	return nil
}

// forwardWatchEvery is how often a forward in progress checks that its
// target still owns the session.
const forwardWatchEvery = 2 * time.Second

// watchOwner checks every forwardWatchEvery, until done, that host still
// owns session; when another host does, it says which on moved and cuts
// the forward. Its first check comes at a random moment of the first
// period: forwards begun together (a client opening a hundred streams at
// once) would otherwise read their leases together, every period, for as
// long as they last.
func (s *Server) watchOwner(ctx context.Context, session string, host ClusterHost, done <-chan struct{}, moved chan<- ClusterHost, cut func()) {
	t := time.NewTimer(rand.N(forwardWatchEvery))
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(forwardWatchEvery)
		}
		now, self, err := s.cfg.Cluster.Owner(ctx, session)
		if err != nil || (!self && now.ID == host.ID) {
			continue // still its owner, or not known yet
		}
		if self {
			now = ClusterHost{ID: s.cfg.Cluster.Self()}
		}
		s.log.Warn("forward cut: the session has another owner", "session", session, "was", host.ID, "now", now.ID)
		moved <- now
		cut()
		return
	}
}

// answerWatch notes whether the answer to a forwarded request has begun.
type answerWatch struct {
	http.ResponseWriter
	started atomic.Bool
}

func (a *answerWatch) WriteHeader(code int) {
	a.started.Store(true)
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerWatch) Write(b []byte) (int, error) {
	a.started.Store(true)
	return a.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer underneath (to
// flush a stream, or hijack an upgraded connection).
func (a *answerWatch) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// rewriteForward addresses the outgoing request to the owner and signs
// it (hostauth.go): the user's credential stays here (this host's
// signature stands for it), and so do the browser's origin headers
// (checked here) and an attach ticket (used here); what a client sent
// under the cluster's header names is replaced. The cluster key itself is
// never sent.
func (s *Server) rewriteForward(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(forwardKey{}).(forwardTarget)
	pr.SetURL(t.url)
	h := pr.Out.Header
	for _, k := range []string{"Authorization", "Cookie", "Origin", "Sec-Fetch-Site", "Sec-Fetch-Mode", "Sec-Fetch-Dest", "Sec-Fetch-User", HeaderClusterKey} {
		h.Del(k)
	}
	if q := pr.Out.URL.Query(); q.Has("ticket") {
		q.Del("ticket")
		pr.Out.URL.RawQuery = q.Encode()
	}
	pr.SetXForwarded()
	self := s.cfg.Cluster.Self()
	rs := newRequestSignature(pr.Out.Method, pr.Out.URL.RequestURI(), t.body, t.host.ID, self, time.Now())
	h.Set(HeaderForwardedBy, self)
	h.Set(HeaderSignature, rs.header(s.keys.sign))
}

// forwardError answers a forward that failed before the owner answered:
// 503 naming the host, or nothing when the client went away.
func (s *Server) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		if s.base.Err() != nil {
			s.writeError(w, r, errShuttingDown)
		}
		return
	}
	t, _ := r.Context().Value(forwardKey{}).(forwardTarget)
	if he := (*hostHelloError)(nil); errors.As(err, &he) {
		// Logged where the hello failed.
		s.writeError(w, r, &Error{Status: http.StatusServiceUnavailable, Code: CodeHostUnreachable, RetryAfter: retryAfterMoving,
			Message: he.Error() + "; nothing was sent to it"})
		return
	}
	// 503 with Retry-After: a host that died has its sessions taken over
	// by the others once its leases expire, and the same request then
	// reaches the new owner.
	s.writeError(w, r, &Error{Status: http.StatusServiceUnavailable, Code: CodeHostUnreachable, RetryAfter: retryAfterMoving,
		Message: fmt.Sprintf("host %q (%s), which owns the session, did not answer (%v); if it stopped, another host takes the session over once its lease expires", t.host.ID, t.url.Redacted(), err)})
}

// close drops the idle connections to other hosts.
func (f *forwarder) close() {
	if f != nil {
		f.transport.CloseIdleConnections()
	}
}
