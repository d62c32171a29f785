package httpapi

import (
	"container/list"
	"context"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults of ConnLimits.
const (
	// DefaultMaxUnproven is the most connections kept open that have not
	// yet carried a request with a valid credential.
	DefaultMaxUnproven = 512
	// DefaultMaxProven is the most connections kept open that have.
	DefaultMaxProven = 1024
	// DefaultReadHeaderTimeout bounds the reading of a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultBodyTimeout bounds the reading of a request's body.
	DefaultBodyTimeout = 15 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection idle this long.
	DefaultIdleTimeout = 90 * time.Second
)

// Guard tuning.
const (
	// fileLimitShare: each class of connections gets at most this share
	// of the file limit, leaving the rest to the store and the agents.
	fileLimitShare = 4
	// minConnCap is the smallest cap sized from a file limit.
	minConnCap = 16
	// newConnGrace is how long a connection that has sent nothing yet is
	// left alone while idle ones can be closed instead.
	newConnGrace = time.Second
	// evictLogPeriod: evictions are logged at most this often.
	evictLogPeriod = time.Minute
)

// Log attribute keys of the connection guard.
const (
	logKeyUnproven    = "unproven"
	logKeyProven      = "proven"
	logKeyMaxUnproven = "max_unproven"
	logKeyMaxProven   = "max_proven"
)

// ConnLimits bounds the API's connections and how long a request may take
// to arrive. Zero fields take the defaults.
//
// A connection is unproven until one of its requests carries a valid
// credential. At most MaxUnproven unproven connections are kept: admitting
// one more closes the one that has been idle longest (a keep-alive
// connection between requests, or one that has sent nothing for a moment),
// else the oldest. Proven connections are bounded separately by MaxProven,
// and only idle ones are ever closed to respect it. So local processes
// that hold thousands of connections without the token cannot lock the
// token's owner out: the owner's new connection is closed only if hundreds
// of newer ones arrive before its first request's headers do.
type ConnLimits struct {
	// FileLimit is the process's open file limit (RLIMIT_NOFILE), if
	// known: each cap is at most a quarter of it.
	FileLimit int
	// MaxUnproven caps connections without a credential (default
	// DefaultMaxUnproven).
	MaxUnproven int
	// MaxProven caps connections with one (default DefaultMaxProven).
	MaxProven int
	// ReadHeaderTimeout bounds a request's headers (default
	// DefaultReadHeaderTimeout).
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds a request's body, from the end of its headers
	// (default DefaultBodyTimeout): a slower body is answered 408 and its
	// connection closed.
	BodyTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long (default
	// DefaultIdleTimeout). Event streams and terminal attachments are not
	// idle: they are not cut.
	IdleTimeout time.Duration
}

// withDefaults fills the zero fields of l.
func (l ConnLimits) withDefaults() ConnLimits {
	capOf := func(v, def int) int {
		if v > 0 {
			return v
		}
		if l.FileLimit > 0 {
			def = min(def, max(l.FileLimit/fileLimitShare, minConnCap))
		}
		return def
	}
	l.MaxUnproven = capOf(l.MaxUnproven, DefaultMaxUnproven)
	l.MaxProven = capOf(l.MaxProven, DefaultMaxProven)
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = DefaultBodyTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	return l
}

// HTTPServer returns the http.Server to serve s with: its timeouts and the
// connection guard's hooks are set. There is no WriteTimeout: ordinary
// answers are small, and the event streams bound each write themselves.
func (s *Server) HTTPServer(errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.Conns.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.Conns.IdleTimeout,
		ConnContext:       s.conns.connContext,
		ConnState:         s.conns.connState,
		ErrorLog:          errorLog,
	}
}

// connKey is the request context key of the request's connection.
type connKey struct{}

// connClass is a connection's standing with the guard.
type connClass int

const (
	unproven connClass = iota
	proven
)

// connBucket orders a class's connections by the time they entered
// their state: the front of each bucket's list is the one in it longest.
type connBucket int

const (
	bucketIdle   connBucket = iota // http.StateIdle: between requests
	bucketNew                      // http.StateNew: nothing read yet
	bucketActive                   // http.StateActive: a request under way
	numBuckets
)

// bucketOf is the bucket of a connection in state st.
func bucketOf(st http.ConnState) connBucket {
	switch st {
	case http.StateIdle:
		return bucketIdle
	case http.StateNew:
		return bucketNew
	}
	return bucketActive
}

// trackedConn is one connection the guard follows.
type trackedConn struct {
	conn   net.Conn
	class  connClass
	bucket connBucket
	since  time.Time // when it entered its bucket
	// activeAt is when its last request began (its admission before any).
	activeAt time.Time
	elem     *list.Element
}

// connGuard tracks the server's connections (see ConnLimits). It is safe
// for concurrent use; http.Server calls connState from every connection's
// goroutine, StateNew from its accept loop, so admission is O(1).
type connGuard struct {
	limits ConnLimits
	log    *slog.Logger
	now    func() time.Time

	mu    sync.Mutex
	conns map[net.Conn]*trackedConn
	// lists holds each class's connections by bucket, in order of entry.
	lists   [2][numBuckets]list.List
	evicted [2]uint64
	// unlogged counts evictions not yet logged; lastLog is the last log.
	unlogged [2]int
	lastLog  time.Time
}

// newConnGuard returns a guard for limits (defaults already filled).
func newConnGuard(limits ConnLimits, log *slog.Logger) *connGuard {
	return &connGuard{limits: limits, log: log, now: time.Now, conns: map[net.Conn]*trackedConn{}}
}

// connContext records the connection in its requests' context.
func (g *connGuard) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// connState follows a connection's life: a new one is admitted as
// unproven (closing another past the cap), hijacked and closed ones leave.
func (g *connGuard) connState(c net.Conn, st http.ConnState) {
	var victim net.Conn
	g.mu.Lock()
	switch st {
	case http.StateNew:
		t := &trackedConn{conn: c, class: unproven}
		g.conns[c] = t
		g.placeLocked(t, bucketNew)
		t.activeAt = t.since
		if g.countLocked(unproven) > g.limits.MaxUnproven {
			victim = g.evictLocked(unproven, t)
		}
	case http.StateActive, http.StateIdle:
		if t := g.conns[c]; t != nil {
			g.unplaceLocked(t)
			g.placeLocked(t, bucketOf(st))
			if st == http.StateActive {
				t.activeAt = t.since
			}
			// The proven connections may be past their cap with none
			// idle to close when the last was proven (all were busy,
			// or the one that finished had not yet been marked idle):
			// once no busier connection is older, the least recently
			// used idle one is closed.
			if st == http.StateIdle && t.class == proven && g.countLocked(proven) > g.limits.MaxProven {
				if lru := g.leastRecentIdleLocked(proven); lru != nil {
					victim = lru.conn
					g.forgetEvictedLocked(lru, proven)
				}
			}
		}
	case http.StateHijacked, http.StateClosed:
		g.removeLocked(c)
	}
	g.mu.Unlock()
	if victim != nil {
		_ = victim.Close()
	}
}

// prove marks the connection of r, a request that carried a valid
// credential, as proven; past MaxProven the proven connection idle
// longest is closed.
func (g *connGuard) prove(r *http.Request) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if c == nil {
		return
	}
	var victim net.Conn
	g.mu.Lock()
	if t := g.conns[c]; t != nil && t.class == unproven {
		b := t.bucket
		g.unplaceLocked(t)
		t.class = proven
		g.placeLocked(t, b)
		if g.countLocked(proven) > g.limits.MaxProven {
			victim = g.evictLocked(proven, t)
		}
	}
	g.mu.Unlock()
	if victim != nil {
		_ = victim.Close()
	}
}

// leastRecentIdleLocked is the idle connection of class whose last
// request began first, or nil when a busy one began before it (that one
// goes idle soon, and is the one to close then). It scans: only the
// proven class, small and rarely past its cap, uses it.
func (g *connGuard) leastRecentIdleLocked(class connClass) *trackedConn {
	var lru *trackedConn
	for e := g.lists[class][bucketIdle].Front(); e != nil; e = e.Next() {
		if t := e.Value.(*trackedConn); lru == nil || t.activeAt.Before(lru.activeAt) {
			lru = t
		}
	}
	if lru == nil {
		return nil
	}
	for e := g.lists[class][bucketActive].Front(); e != nil; e = e.Next() {
		if e.Value.(*trackedConn).activeAt.Before(lru.activeAt) {
			return nil
		}
	}
	return lru
}

// placeLocked puts t at the back of its class's list for bucket b.
func (g *connGuard) placeLocked(t *trackedConn, b connBucket) {
	t.bucket, t.since = b, g.now()
	t.elem = g.lists[t.class][b].PushBack(t)
}

// unplaceLocked takes t out of its list.
func (g *connGuard) unplaceLocked(t *trackedConn) {
	g.lists[t.class][t.bucket].Remove(t.elem)
}

// countLocked is the number of connections of class.
func (g *connGuard) countLocked(class connClass) int {
	n := 0
	for b := range numBuckets {
		n += g.lists[class][b].Len()
	}
	return n
}

// frontLocked is the connection of class in bucket b longest, keep
// excepted, or nil.
func (g *connGuard) frontLocked(class connClass, b connBucket, keep *trackedConn) *trackedConn {
	for e := g.lists[class][b].Front(); e != nil; e = e.Next() {
		if t := e.Value.(*trackedConn); t != keep {
			return t
		}
	}
	return nil
}

// evictLocked picks the connection of class to close for keep, forgets it
// and returns it (nil if none may go). Unproven: the one idle longest,
// else one silent for newConnGrace, else the oldest. Proven: only an idle
// one.
func (g *connGuard) evictLocked(class connClass, keep *trackedConn) net.Conn {
	now := g.now()
	victim := g.frontLocked(class, bucketIdle, keep)
	if victim == nil && class == unproven {
		silent := g.frontLocked(class, bucketNew, keep)
		active := g.frontLocked(class, bucketActive, keep)
		switch {
		case silent != nil && now.Sub(silent.since) >= newConnGrace:
			victim = silent
		case silent == nil || active != nil && active.since.Before(silent.since):
			victim = active
		default:
			victim = silent
		}
	}
	if victim == nil {
		return nil
	}
	g.forgetEvictedLocked(victim, class)
	return victim.conn
}

// forgetEvictedLocked forgets victim, a connection of class about to be
// closed, counts it, and logs (at most once per evictLogPeriod).
func (g *connGuard) forgetEvictedLocked(victim *trackedConn, class connClass) {
	now := g.now()
	g.removeLocked(victim.conn)
	g.evicted[class]++
	g.unlogged[class]++
	if now.Sub(g.lastLog) >= evictLogPeriod {
		g.log.Warn("API connection limit reached: closed connections to admit new ones",
			logKeyUnproven, g.unlogged[unproven], logKeyProven, g.unlogged[proven],
			logKeyMaxUnproven, g.limits.MaxUnproven, logKeyMaxProven, g.limits.MaxProven)
		g.unlogged = [2]int{}
		g.lastLog = now
	}
}

// removeLocked forgets c.
func (g *connGuard) removeLocked(c net.Conn) {
	if t := g.conns[c]; t != nil {
		g.unplaceLocked(t)
		delete(g.conns, c)
	}
}

// connStats is a snapshot of the guard's numbers.
type connStats struct {
	open, evicted [2]uint64
}

// stats returns the guard's numbers.
func (g *connGuard) stats() connStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return connStats{open: [2]uint64{uint64(g.countLocked(unproven)), uint64(g.countLocked(proven))}, evicted: g.evicted}
}

// collectConns adds the guard's gauges and counters to e.
func (s *Server) collectConns(e *exposition) {
	st := s.conns.stats()
	byClass := func(v [2]uint64) []series {
		return []series{
			{labels: []label{{"class", "unproven"}}, value: float64(v[unproven])},
			{labels: []label{{"class", "proven"}}, value: float64(v[proven])},
		}
	}
	e.add(metricsNamespace+"http_connections", "HTTP connections open now, by whether one of their requests carried a valid credential.",
		typeGauge, byClass(st.open)...)
	e.add(metricsNamespace+"http_connections_closed_total", "HTTP connections the server closed to admit new ones past its limits.",
		typeCounter, byClass(st.evicted)...)
}
