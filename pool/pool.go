package pool

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/permission"
)

// Defaults of Config.
const (
	DefaultMaxWarm      = 16
	DefaultIdleTimeout  = 15 * time.Minute
	DefaultStartTimeout = 60 * time.Second
	DefaultStopTimeout  = 15 * time.Second
	DefaultCrashLimit   = 3
	DefaultCrashWindow  = 5 * time.Minute
	DefaultRingSize     = 4096
	DefaultRingBytes    = 8 << 20
	DefaultReapInterval = time.Second
)

// globalRing and globalRingBytes bound the events the daemon-wide stream
// keeps in memory, by count and by bytes (its newest event is kept
// whatever its size): a subscriber that falls further behind is dropped.
const (
	globalRing      = 1024
	globalRingBytes = 8 << 20
)

// Config configures a Pool. Store, Worktrees, Resolver and Launcher are required.
type Config struct {
	Store     Store
	Worktrees Worktrees
	Resolver  Resolver
	Launcher  Launcher
	// Leases, when several hosts share the store, says which sessions this
	// host owns and hands them over (see lease.go); nil for one host.
	Leases Leases
	// Usage keeps what agents report they used and the sessions'
	// budgets (see usage.go); nil: usage is not kept and no budget holds.
	Usage UsageStore
	// Reviews, when set, gives briefings the session's open review
	// comments (see briefing).
	Reviews ReviewReader
	// MaxWarm caps the backends kept running (default 16).
	MaxWarm int
	// IdleTimeout stops a backend unused this long, unless its provider sets one.
	IdleTimeout time.Duration
	// MemoryBudget caps the RSS of all agent process trees, in bytes
	// (default half the machine's memory; negative disables).
	MemoryBudget int64
	// SlowedRate is the bytes per second at which a slowed agent's events
	// are taken while other sessions are at work (see pace in fair.go):
	// 0 means DefaultSlowedRate, negative means no pacing (the write
	// queue's room alone holds a flooding agent).
	SlowedRate int64
	// StartTimeout bounds an agent's start and handshake.
	StartTimeout time.Duration
	// StopTimeout bounds stopping one agent.
	StopTimeout time.Duration
	// CrashLimit crashes within CrashWindow mark an agent failing for a session.
	CrashLimit  int
	CrashWindow time.Duration
	// PermissionTimeout is how long a permission request waits for a person.
	PermissionTimeout time.Duration
	// RingSize is how many recent events per session are kept in memory to
	// serve subscribers without reading the store (a subscriber further
	// behind reads the store), at most (default 4096); RingBytes bounds
	// their bytes too.
	RingSize int
	// RingBytes is how many bytes of recent events per session are kept in
	// memory at most, counting each event's Data and its slot (default 8
	// MiB): the oldest leave memory first and are read from the store. The
	// newest event is kept even when it alone is bigger.
	RingBytes int64
	// ReapInterval is how often Run looks for idle backends.
	ReapInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// GroupRSS returns the RSS in bytes of every process group, by pgid
	// (default: read from /proc, one scan kept for a quarter second). The
	// map returned is not changed by its callers.
	GroupRSS func() map[int]int64
	// NewID makes session ids (default: random).
	NewID  func() string
	Logger *slog.Logger
	// Spares keeps spare sessions ready (see spares.go); zero: none.
	Spares SparesConfig
}

// Pool is the AgentPool. Create it with New, call Recover once, run Run in a
// goroutine, and end it with Shutdown.
type Pool struct {
	cfg    Config
	logger *slog.Logger
	broker *permission.Broker
	rss    *rssCache // the memory budget's scans of /proc; nil when Config.GroupRSS was given

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	sessions map[string]*session
	entries  map[key]*entry
	// forkSeeds are the agent sessions a fork's agent forks at its first
	// start (fork.go), by fork.
	forkSeeds map[string]forkSeed
	// earlies are the launches started early for a new session's first
	// agent (see early.go), until its first start takes one.
	earlies map[key]Early
	closing bool
	slots   slotQueue // prompts waiting for a backend slot

	global *Feed // the daemon-wide stream

	// forgotten counts the closed sessions dropped from sessions, under mu
	// (see evict_sessions.go).
	forgotten int64

	spawns, crashes, evictions, turns, turnErrors, published, dropped, catchups, permWaits atomic.Int64
	// lastOther is when a session that is not slowed last published (unix
	// ns): a slowed one is paced while others are at work (see pace).
	lastOther atomic.Int64

	// spares are the spares by id (see spares.go); spareWake asks for a
	// check of them now.
	spares    map[string]*spare
	spareWake chan struct{}

	// budgetStops counts the turns a budget cancelled.
	budgetStops atomic.Int64

	// moveMu serializes the making of worktrees of sessions that came
	// from another host (see loadHere).
	moveMu sync.Mutex

	histMu   sync.Mutex
	turnHist histogram
	permHist histogram
}

// New returns a Pool.
func New(cfg Config) (*Pool, error) {
	if cfg.Store == nil || cfg.Worktrees == nil || cfg.Resolver == nil || cfg.Launcher == nil {
		return nil, errors.New("pool: Store, Worktrees, Resolver and Launcher are required")
	}
	if cfg.MaxWarm <= 0 {
		cfg.MaxWarm = DefaultMaxWarm
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.SlowedRate == 0 {
		cfg.SlowedRate = DefaultSlowedRate
	}
	if cfg.MemoryBudget == 0 {
		cfg.MemoryBudget = backends.MemTotal() / 2
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.CrashLimit <= 0 {
		cfg.CrashLimit = DefaultCrashLimit
	}
	if cfg.CrashWindow <= 0 {
		cfg.CrashWindow = DefaultCrashWindow
	}
	if cfg.RingSize <= 0 {
		cfg.RingSize = DefaultRingSize
	}
	if cfg.RingBytes <= 0 {
		cfg.RingBytes = DefaultRingBytes
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = DefaultReapInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	var rss *rssCache
	if cfg.GroupRSS == nil {
		// The real scan is kept for rssFresh; a GroupRSS given (by a
		// test) is asked every time.
		rss = &rssCache{scan: backends.GroupRSS, fresh: rssFresh, stale: rssStale, now: time.Now}
		cfg.GroupRSS = rss.get
	}
	if cfg.NewID == nil {
		cfg.NewID = newID
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	p := &Pool{
		cfg:       cfg,
		rss:       rss,
		logger:    logger,
		sessions:  map[string]*session{},
		entries:   map[key]*entry{},
		earlies:   map[key]Early{},
		spares:    map[string]*spare{},
		spareWake: make(chan struct{}, 1),
		turnHist:  newHistogram(turnBounds),
		permHist:  newHistogram(permBounds),
	}
	p.global = newStampedFeed(globalRing, globalRingBytes, &p.dropped)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.broker = permission.NewBroker(permission.Config{
		Timeout:     cfg.PermissionTimeout,
		Now:         cfg.Now,
		Logger:      logger,
		OnRequested: p.onPermissionRequested,
		OnResolved:  p.onPermissionResolved,
	})
	return p, nil
}

// newID returns a short random session id that is valid as a git ref part.
func newID() string {
	return "s-" + rand.Text()[:12]
}

// Run reaps idle backends, and keeps the spares (see spares.go), until
// ctx ends.
func (p *Pool) Run(ctx context.Context) error {
	if p.sparesOn() {
		done := make(chan struct{})
		go func() { defer close(done); p.runSpares(ctx) }()
		defer func() { <-done }()
	}
	t := time.NewTicker(p.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.ctx.Done():
			return nil
		case <-t.C:
			p.ReapIdle()
		}
	}
}

// Shutdown ends the pool. From its first step, new sessions, prompts and
// agent starts get ErrClosed. Pending permission requests are answered
// cancelled, running turns are cancelled the protocol's way and given
// shutdownTurnGrace to end, then every backend is stopped in parallel with
// its ladder (stdin closed, SIGTERM, SIGKILL to its process group and
// cgroup, each within StopTimeout), starts in flight are cut short, and
// the events are flushed.
//
// ctx bounds all of it: when ctx ends, the ladders jump to SIGKILL,
// whatever is still running is killed, and Shutdown returns by the
// deadline plus ShutdownKillWait; it then reports what it could not wait
// for or flush. A second call waits for the pool's goroutines under its own ctx.
func (p *Pool) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		if err := p.awaitGoroutines(ctx); err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
		return nil
	}
	p.closing = true
	var runs []*turnRun
	for _, s := range p.sessions {
		s.mu.Lock()
		if s.turn != nil {
			runs = append(runs, s.turn)
		}
		s.mu.Unlock()
	}
	p.mu.Unlock()

	p.broker.Close()
	p.dropAllSpares()
	cancelTurns(ctx, runs, shutdownTurnGrace)
	p.stopEntries(ctx, func(*entry) bool { return true }, "shutdown")
	p.cancel()
	var errs []error
	if err := p.awaitGoroutines(ctx); err != nil {
		errs = append(errs, err)
	}
	if p.rss != nil {
		p.rss.close()
	}
	if err := ctx.Err(); err != nil {
		// Flushing now would not wait: the store's own Close writes what
		// is queued, under its own budget.
		errs = append(errs, fmt.Errorf("events not flushed: %w", context.Cause(ctx)))
	} else if err := p.cfg.Store.Flush(ctx); err != nil {
		errs = append(errs, fmt.Errorf("flush events: %w", err))
	}
	p.mu.Lock()
	for _, s := range p.sessions {
		s.feed.Close(ErrClosed)
	}
	p.mu.Unlock()
	p.global.Close(ErrClosed)
	if len(errs) > 0 {
		return fmt.Errorf("shutdown: %w", errors.Join(errs...))
	}
	return nil
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	st := Stats{
		Warm:               map[string]map[string]int{},
		Spawns:             p.spawns.Load(),
		Crashes:            p.crashes.Load(),
		Evictions:          p.evictions.Load(),
		Turns:              p.turns.Load(),
		TurnErrors:         p.turnErrors.Load(),
		BudgetCancels:      p.budgetStops.Load(),
		EventsPublished:    p.published.Load(),
		SubscribersDrop:    p.dropped.Load(),
		SubscriberCatchups: p.catchups.Load(),
		PermissionWaits:    p.permWaits.Load(),
	}
	p.mu.Lock()
	st.Sessions = len(p.sessions)
	p.queueStatsLocked(&st)
	for k, e := range p.entries {
		m := st.Warm[k.agent]
		if m == nil {
			m = map[string]int{}
			st.Warm[k.agent] = m
		}
		m[e.stateLocked()]++
	}
	p.mu.Unlock()
	p.histMu.Lock()
	st.TurnDurations = p.turnHist.snapshot()
	st.PermissionWaitsS = p.permHist.snapshot()
	p.histMu.Unlock()
	return st
}
