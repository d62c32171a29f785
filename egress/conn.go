package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"time"
)

// conn is one connection from an agent.
type conn struct {
	l   *Listener
	c   net.Conn
	lr  *io.LimitedReader // bounds what a header may read
	br  *bufio.Reader
	log *slog.Logger
}

// newConn wraps c for l.
func newConn(l *Listener, c net.Conn) *conn {
	lr := &io.LimitedReader{R: c, N: MaxHeaderBytes}
	return &conn{l: l, c: c, lr: lr, br: bufio.NewReaderSize(lr, 4096), log: l.log}
}

// serve tells the protocol by the first byte and serves it.
func (s *conn) serve() {
	s.c.SetDeadline(time.Now().Add(s.l.p.cfg.HandshakeTimeout))
	first, err := s.br.Peek(1)
	if err != nil {
		return
	}
	switch first[0] {
	case socks5Version:
		s.serveSOCKS()
	case socks4Version:
		// SOCKS4 and 4a: "request rejected", then close.
		s.c.Write([]byte{0, 0x5b, 0, 0, 0, 0, 0, 0})
	default:
		s.serveHTTP()
	}
}

// unlimit lifts the header bound and the deadlines once a handshake is
// over.
func (s *conn) unlimit() {
	s.lr.N = math.MaxInt64
	s.c.SetDeadline(time.Time{})
}

// open checks t against the listener's current policy and connects to it,
// through the upstream proxy for scheme when the daemon has one. It
// returns the live connection, or the refusal (already logged, counted and
// reported), or the error of a failed resolution or dial.
func (s *conn) open(t target, scheme, proto string) (net.Conn, *Refusal, error) {
	p := s.l.p
	ctx, cancel := context.WithTimeout(s.l.ctx, p.cfg.DialTimeout)
	defer cancel()
	addrs, ref, err := p.route(ctx, s.l.rules.Load(), t)
	if err != nil {
		return nil, nil, err
	}
	if ref != nil {
		ref.Meta = s.l.meta
		p.refused.Add(1)
		s.log.Info("egress: refused", keyProto, proto, keyTarget, t.String(), keyAddr, ref.Addr, keyReason, ref.Reason, keyAllow, ref.Allow)
		if p.cfg.OnRefused != nil {
			p.cfg.OnRefused(*ref)
		}
		return nil, ref, nil
	}
	p.allowed.Add(1)
	up, err := p.dial(ctx, scheme, t, addrs)
	if err != nil {
		s.log.Debug("egress: dial failed", keyProto, proto, keyTarget, t.String(), keyErr, err)
		return nil, nil, err
	}
	if !s.l.track(up) {
		up.Close()
		return nil, nil, ErrClosed
	}
	s.log.Debug("egress: connected", keyProto, proto, keyTarget, t.String(), keyAddr, up.RemoteAddr().String())
	return up, nil, nil
}

// timeout reports whether err is a timeout.
func timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
