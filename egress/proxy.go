package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	// DefaultMaxConns is the number of connections one Listener serves at
	// once; the next are closed at once.
	DefaultMaxConns = 256
	// DefaultHandshakeTimeout bounds the reading of a request's header or a
	// SOCKS5 handshake.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultDialTimeout bounds the resolving of a name and the connecting
	// to it (through the upstream proxy, if any).
	DefaultDialTimeout = 10 * time.Second
	// MaxHeaderBytes bounds the header of an HTTP request.
	MaxHeaderBytes = 64 << 10
)

// idleTimeout is how long a kept-alive HTTP connection may wait for its
// next request.
const idleTimeout = 90 * time.Second

// Log attribute keys.
const (
	keySession  = "session"
	keyProvider = "provider"
	keyTarget   = "target"
	keyAddr     = "addr"
	keyReason   = "reason"
	keyAllow    = "allow"
	keyProto    = "proto"
	keyErr      = "err"
	keyRetry    = "retry"
	keyMax      = "max"
	keyPanic    = "panic"
	keyStack    = "stack"
	keyCommand  = "cmd"
)

// ErrClosed is returned by Proxy.Listen after Proxy.Close.
var ErrClosed = errors.New("egress: proxy closed")

// Resolver looks up the addresses of a host name; *net.Resolver is one.
// network is "ip". A cancelled ctx ends the look-up with an error.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Proxy. The zero value is usable.
type Config struct {
	// Resolver resolves the names agents ask for; nil means
	// net.DefaultResolver.
	Resolver Resolver
	// Dialer connects to a checked address ("tcp", "ip:port") or to the
	// upstream proxy; nil means a net.Dialer. The context carries the dial
	// timeout.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// Upstream returns the proxy the daemon itself goes through for a
	// target URL ("https://host:port" for tunnels, "http://host:port" for
	// plain requests), or nil to connect directly. Agents' connections go
	// out through it with CONNECT to the checked address (http and https
	// upstreams). nil means the daemon's environment (HTTPS_PROXY,
	// HTTP_PROXY, NO_PROXY), as http.ProxyFromEnvironment reads it once per
	// process.
	Upstream func(*url.URL) (*url.URL, error)
	// Deny lists the daemon's own listen addresses. A connection to one is
	// refused unless an entry names that exact address and port
	// ("127.0.0.1:7777", "localhost:7777"); an unspecified address
	// ("0.0.0.0:7777", "[::]:7777") stands for every address on its port.
	Deny []netip.AddrPort
	// OnRefused, if set, is called with every refusal, from the goroutine
	// serving the connection: it must not block for long.
	OnRefused func(Refusal)
	// Logger receives the proxy's logs; nil means slog.Default().
	Logger *slog.Logger
	// MaxConns is the number of connections one Listener serves at once
	// (DefaultMaxConns if 0).
	MaxConns int
	// HandshakeTimeout bounds each request header and SOCKS5 handshake
	// (DefaultHandshakeTimeout if 0).
	HandshakeTimeout time.Duration
	// DialTimeout bounds resolving and connecting (DefaultDialTimeout if 0).
	DialTimeout time.Duration
}

// Stats are a Proxy's counters since New.
type Stats struct {
	// Allowed counts the connections and requests the policies allowed.
	Allowed uint64
	// Refused counts the connections and requests the policies refused.
	Refused uint64
	// Busy counts the connections closed at once because their Listener
	// already served MaxConns.
	Busy uint64
}

// Proxy serves the Listeners of agent launches. It is safe for concurrent
// use.
type Proxy struct {
	cfg    Config
	deny   []netip.AddrPort
	log    *slog.Logger
	ctx    context.Context // cancelled by Close: ends dials in flight
	cancel context.CancelFunc

	mu        sync.Mutex
	listeners map[*Listener]struct{}
	closed    bool

	allowed, refused, busy atomic.Uint64
}

// New returns a Proxy with no Listener.
func New(cfg Config) (*Proxy, error) {
	if cfg.MaxConns < 0 || cfg.HandshakeTimeout < 0 || cfg.DialTimeout < 0 {
		return nil, errors.New("egress: negative MaxConns, HandshakeTimeout or DialTimeout")
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dialer == nil {
		d := &net.Dialer{}
		cfg.Dialer = d.DialContext
	}
	if cfg.Upstream == nil {
		cfg.Upstream = func(u *url.URL) (*url.URL, error) {
			return http.ProxyFromEnvironment(&http.Request{URL: u})
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	p := &Proxy{cfg: cfg, log: cfg.Logger, listeners: map[*Listener]struct{}{}}
	for _, d := range cfg.Deny {
		if !d.IsValid() {
			return nil, fmt.Errorf("egress: invalid Deny address %v", d)
		}
		p.deny = append(p.deny, netip.AddrPortFrom(d.Addr().Unmap(), d.Port()))
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{Allowed: p.allowed.Load(), Refused: p.refused.Load(), Busy: p.busy.Load()}
}

// Close closes every Listener and every live connection, ends the dials in
// flight and waits for the proxy's goroutines. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	ls := make([]*Listener, 0, len(p.listeners))
	for l := range p.listeners {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	p.cancel()
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// route returns the addresses of t that l's rules allow, in the resolver's
// order, or the refusal; the error is a failed resolution.
func (p *Proxy) route(ctx context.Context, r *rules, t target) ([]netip.Addr, *Refusal, error) {
	var addrs []netip.Addr
	switch {
	case t.addr.IsValid():
		addrs = []netip.Addr{t.addr}
	case !r.mayAllow(t):
		reason := reasonNotListed
		if r.mode == ModeNone {
			reason = reasonNone
		}
		return nil, refusal(t, netip.Addr{}, reason, p.deny), nil
	case t.name == "localhost":
		addrs = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
	default:
		var err error
		addrs, err = p.cfg.Resolver.LookupNetIP(ctx, "ip", t.name)
		if err != nil {
			return nil, nil, fmt.Errorf("resolve: %w", err)
		}
		if len(addrs) == 0 {
			return nil, nil, fmt.Errorf("resolve %s: no address", t.name)
		}
	}
	var ok []netip.Addr
	var first *Refusal
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if slices.Contains(ok, a) {
			continue
		}
		if reason := r.check(t, a, p.deny); reason == "" {
			ok = append(ok, a)
		} else if first == nil {
			first = refusal(t, a, reason, p.deny)
		}
	}
	if len(ok) == 0 {
		return nil, first, nil
	}
	return ok, nil, nil
}

// dial connects to t at one of addrs, in order, directly or through the
// upstream proxy for scheme ("http" or "https"). Each address gets an
// equal share of what is left of ctx's deadline, as net.Dialer does.
func (p *Proxy) dial(ctx context.Context, scheme string, t target, addrs []netip.Addr) (net.Conn, error) {
	up, err := p.cfg.Upstream(&url.URL{Scheme: scheme, Host: t.String()})
	if err != nil {
		return nil, fmt.Errorf("upstream proxy for %s: %w", t, err)
	}
	var first error
	for i, a := range addrs {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); ok && i < len(addrs)-1 {
			share := time.Until(dl) / time.Duration(len(addrs)-i)
			actx, cancel = context.WithTimeout(ctx, max(share, 2*time.Second))
		}
		ap := netip.AddrPortFrom(a, t.port)
		var c net.Conn
		if up != nil {
			c, err = p.tunnel(actx, up, ap)
		} else {
			c, err = p.cfg.Dialer(actx, "tcp", ap.String())
		}
		cancel()
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}
