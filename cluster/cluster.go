// Package cluster runs what makes several agentpool daemons (hosts) on
// one shared store one pool: it renews the leases of the sessions this
// host owns and releases those it lost, takes over the sessions of hosts
// that died once their leases expire (failover), hands every session to
// other hosts when this one drains, and answers httpapi's questions about
// the cluster: which host owns a session, where to place a new one, and
// which credentials other hosts accept.
package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentpool/agentpool/hosts"
	"github.com/agentpool/agentpool/pool"
)

// Lease is the ownership of one session by one host.
type Lease struct {
	Session string
	Owner   string
	Epoch   int64
	Expires time.Time
	// Open is false for a closed session (its lease no longer matters).
	Open bool
	// Agent is the session's active agent.
	Agent string
}

// Store is what the cluster needs of the shared store's leases.
type Store interface {
	// Lease returns the lease of a session; an error wrapping
	// pool.ErrNotFound when there is no such session.
	Lease(ctx context.Context, session string) (Lease, error)
	// RenewLeases extends the leases this host holds and returns the
	// sessions whose lease it lost.
	RenewLeases(ctx context.Context) (lost []string, err error)
	// ExpiredLeases lists open sessions of other hosts whose lease
	// expired.
	ExpiredLeases(ctx context.Context, limit int) ([]Lease, error)
	// TakeOver takes the expired lease of session for this host, ending
	// its running turns as interrupted and recording session.moved, once.
	TakeOver(ctx context.Context, session string) error
	// Owned lists the open sessions this host holds.
	Owned(ctx context.Context) ([]Lease, error)
	// Holds says, from memory, whether this host holds the lease of
	// session: it held or renewed it and has not lost it since.
	Holds(session string) bool
	// HoldHanded holds the leases other hosts handed to this host that
	// it does not hold yet, and returns their sessions.
	HoldHanded(ctx context.Context) ([]string, error)
}

// Hosts lists the hosts of the cluster with their liveness.
type Hosts interface {
	List(ctx context.Context) ([]hosts.Status, error)
}

// Pool is what the cluster needs of this host's pool.
type Pool interface {
	Release(ctx context.Context, ids []string, reason string)
	Move(ctx context.Context, id, to, reason string) (pool.MoveResult, error)
	Owned() []string
}

// Config configures a Cluster.
type Config struct {
	Self  string
	Store Store
	Hosts Hosts
	Pool  Pool
	// Providers says whether this host can run an agent now.
	Providers func(agent string) bool
	// Key is the cluster credential.
	Key string
	// TTL is the leases' time to live; they are renewed every TTL/3.
	TTL time.Duration
	// HostsTTL is how long a listing of hosts is reused (default 500ms).
	HostsTTL time.Duration
	// Claimed, when set, is called for each session this host took over,
	// once the store gave it the lease: it fences the session's pushes on
	// its remote (see wiring.Worktrees.ClaimFence).
	Claimed func(ctx context.Context, session string) error
	// Verify, when set, asks another host to prove it holds this
	// cluster's key; a host that has not proved it is not placed
	// sessions, nor handed any.
	Verify func(ctx context.Context, h Host) error
	// StartGrace is how long after Run starts this host takes no session
	// over (default TTL): when the whole cluster starts again, each host
	// claims its own sessions first, and none is turned into a failover.
	StartGrace time.Duration
	Logger     *slog.Logger
}

// Cluster is this host's part of a pool shared by several hosts.
type Cluster struct {
	cfg Config

	mu       sync.Mutex
	listed   []hosts.Status
	listedAt time.Time
	draining bool
	placed   map[string]placed
	// selfPlaced counts the sessions placed here since the last listing.
	selfPlaced int
	// renewed is when the last renewal of this host's leases that
	// succeeded was sent (unix ns; 0 before the first).
	renewed atomic.Int64

	// seen is when this host first saw each expired lease, and dealt
	// the survivor it dealt it to then (see takeOver).
	seen  map[string]time.Time
	dealt map[string]string
	// claims are the fences being claimed after take-overs.
	claims sync.WaitGroup

	pmu    sync.Mutex
	proofs map[string]proof // by host id and start
}

// ErrSessionMoving is the error of Owner for a session whose owner died
// and that no host has taken over yet.
var ErrSessionMoving = errors.New("session is moving: its host stopped answering and another host will take it over")

// New returns the cluster part of host cfg.Self.
func New(cfg Config) (*Cluster, error) {
	if cfg.Self == "" || cfg.Store == nil || cfg.Hosts == nil || cfg.Pool == nil {
		return nil, errors.New("cluster: Self, Store, Hosts and Pool are required")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.HostsTTL <= 0 {
		cfg.HostsTTL = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Providers == nil {
		cfg.Providers = func(string) bool { return true }
	}
	if cfg.StartGrace <= 0 {
		cfg.StartGrace = cfg.TTL
	}
	return &Cluster{cfg: cfg, seen: map[string]time.Time{}, dealt: map[string]string{}, proofs: map[string]proof{}}, nil
}

// Self is this host's id.
func (c *Cluster) Self() string { return c.cfg.Self }

// Key is the cluster credential.
func (c *Cluster) Key() string { return c.cfg.Key }

// Draining says whether this host is handing its sessions over.
func (c *Cluster) Draining() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.draining
}

// hostList returns the hosts, listed at most HostsTTL ago.
func (c *Cluster) hostList(ctx context.Context) ([]hosts.Status, error) {
	c.mu.Lock()
	if c.listed != nil && time.Since(c.listedAt) < c.cfg.HostsTTL {
		l := c.listed
		c.mu.Unlock()
		return l, nil
	}
	c.mu.Unlock()
	l, err := c.cfg.Hosts.List(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.listed, c.listedAt, c.selfPlaced = l, time.Now(), 0
	c.mu.Unlock()
	return l, nil
}

// Host is a host as httpapi reaches it.
type Host struct{ ID, Advertise string }

// Owner returns the host that owns session, and whether it is this one.
// A closed session, or one this host owns, is served here. A session
// whose owner is dead and whose lease has not been taken over yet is
// ErrSessionMoving.
func (c *Cluster) Owner(ctx context.Context, session string) (Host, bool, error) {
	if c.holdsNow(session) {
		return Host{ID: c.cfg.Self}, true, nil
	}
	l, err := c.cfg.Store.Lease(ctx, session)
	if err != nil {
		if errors.Is(err, pool.ErrNotFound) {
			return Host{ID: c.cfg.Self}, true, nil // the pool says it is not found
		}
		return Host{}, false, fmt.Errorf("owner of session %q: %w", session, err)
	}
	if !l.Open || l.Owner == c.cfg.Self || l.Owner == "" {
		return Host{ID: c.cfg.Self}, true, nil
	}
	list, err := c.hostList(ctx)
	if err != nil {
		return Host{}, false, fmt.Errorf("owner of session %q: %w", session, err)
	}
	for _, h := range list {
		if h.ID == l.Owner && h.Alive && h.Advertise != "" {
			return Host{ID: h.ID, Advertise: h.Advertise}, false, nil
		}
	}
	return Host{ID: l.Owner}, false, fmt.Errorf("session %q of host %s: %w", session, l.Owner, ErrSessionMoving)
}

// holdsNow says, without asking the database, that this host owns
// session: it holds its lease and renewed its leases less than half the
// TTL ago, so no other host can have taken it over (a lease is taken
// only once expired, a TTL after its last renewal) and Run has not had to
// release it. A session this host handed over or lost is no longer held.
// Requests to the owner, the most frequent, then cost no lookup.
func (c *Cluster) holdsNow(session string) bool {
	at := c.renewed.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < c.cfg.TTL/2 && c.cfg.Store.Holds(session)
}

// Errors of Place.
var (
	// ErrNoHost: no live host has the agent.
	ErrNoHost = errors.New("no host can run the agent")
	// ErrUnknownHost: the host asked for is not in the pool.
	ErrUnknownHost = errors.New("no such host")
	// ErrHostDown: the host asked for is not alive, is draining, or does
	// not have the agent.
	ErrHostDown = errors.New("host is not alive, is draining, or does not have the agent")
)

// Place picks the host of a new session of agent: want, if set (it must
// be alive, not draining, and have the agent), else the alive host with
// the most free capacity that has the agent (its capacity less its warm
// agents or its open sessions, whichever is more), then the fewest
// sessions, then this one.
func (c *Cluster) Place(ctx context.Context, agent, want string) (Host, bool, error) {
	list, err := c.hostList(ctx)
	if err != nil {
		return Host{}, false, fmt.Errorf("place a session: %w", err)
	}
	proven := c.verifyHosts(ctx, list)
	c.mu.Lock()
	defer c.mu.Unlock()
	best, bestFree, bestLoad := -1, 0, 0
	for i, h := range list {
		ok := h.Alive && h.Capacity > 0 && slices.Contains(h.Providers, agent) && proven[h.ID]
		if h.Self {
			ok = !c.draining && c.cfg.Providers(agent)
		}
		if want != "" {
			if h.ID != want {
				continue
			}
			if !ok {
				return Host{}, false, fmt.Errorf("host %s, agent %q: %w", want, agent, ErrHostDown)
			}
			return Host{ID: h.ID, Advertise: h.Advertise}, h.Self, nil
		}
		if !ok {
			continue
		}
		// What this host placed there since that host's last heartbeat
		// counts too: a burst of creates must not all go to one host.
		// An open session soon holds a warm agent: a host's room is its
		// capacity less the larger of the two.
		n := c.placedSince(h)
		free, load := h.Capacity-max(h.Warm, h.Sessions)-n, h.Sessions+n
		if best < 0 || free > bestFree || free == bestFree && (load < bestLoad || load == bestLoad && h.Self) {
			best, bestFree, bestLoad = i, free, load
		}
	}
	if want != "" {
		return Host{}, false, fmt.Errorf("%w: %q is not a host of the pool (see agentpool hosts)", ErrUnknownHost, want)
	}
	if best < 0 {
		return Host{}, false, fmt.Errorf("%w %q", ErrNoHost, agent)
	}
	h := list[best]
	c.place(h)
	return Host{ID: h.ID, Advertise: h.Advertise}, h.Self, nil
}

// placed counts the sessions this host placed on another since that
// host's heartbeat at.
type placed struct {
	at time.Time
	n  int
}

// placedSince is how many sessions this host placed on h since h's last
// heartbeat (on itself, since it was last listed, its listing being
// live). c.mu is held.
func (c *Cluster) placedSince(h hosts.Status) int {
	if h.Self {
		return c.selfPlaced
	}
	p, ok := c.placed[h.ID]
	if !ok || h.HeartbeatAt.After(p.at) {
		return 0
	}
	return p.n
}

// place counts a session placed on h. c.mu is held.
func (c *Cluster) place(h hosts.Status) {
	if h.Self {
		c.selfPlaced++
		return
	}
	if c.placed == nil {
		c.placed = map[string]placed{}
	}
	p := c.placed[h.ID]
	if h.HeartbeatAt.After(p.at) {
		p = placed{at: h.HeartbeatAt}
	}
	p.n++
	c.placed[h.ID] = p
}

// KnownToken says whether token is the user token of a live host of the
// cluster (compared by SHA-256).
func (c *Cluster) KnownToken(ctx context.Context, token string) bool {
	if token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	want := hex.EncodeToString(sum[:])
	list, err := c.hostList(ctx)
	if err != nil {
		return false
	}
	ok := false
	for _, h := range list {
		if h.Alive && h.TokenSHA256 != "" && subtle.ConstantTimeCompare([]byte(h.TokenSHA256), []byte(want)) == 1 {
			ok = true
		}
	}
	return ok
}

// TokenHashes returns the SHA-256 of each live host's user token, so that
// this host can prove to a client that it knows the token the client
// holds (see httpapi.TokenHashes) without any token crossing the wire.
func (c *Cluster) TokenHashes(ctx context.Context) [][]byte {
	list, err := c.hostList(ctx)
	if err != nil {
		return nil
	}
	var out [][]byte
	for _, h := range list {
		if !h.Alive || h.TokenSHA256 == "" {
			continue
		}
		if b, err := hex.DecodeString(h.TokenSHA256); err == nil && len(b) == sha256.Size {
			out = append(out, b)
		}
	}
	return out
}

// Run renews this host's leases every TTL/3, first taking up those other
// hosts handed it and releasing the sessions it lost, and takes over the
// sessions of dead hosts, until ctx ends. When it cannot renew for half
// the TTL, it releases every session it holds before their leases run
// out, so that no agent runs for a session another host may take. It
// looks for expired leases more often than it renews (every
// takeOverEvery at most), so that a dead host's sessions all have a new
// owner within about a second of their leases' end.
func (c *Cluster) Run(ctx context.Context) {
	defer c.claims.Wait()
	renewEvery := c.cfg.TTL / 3
	lookEvery := min(renewEvery, takeOverEvery)
	// The looks fall on the wall clock's multiples of lookEvery, the
	// same instants on every host (whose clocks agree): the hosts see a
	// dead host's leases expired at the same look, and deal them out
	// alike.
	wait := time.NewTimer(time.Until(time.Now().Truncate(lookEvery).Add(lookEvery)))
	defer wait.Stop()
	started := time.Now()
	lastRenew, lastTry := time.Now(), time.Time{}
	failing := false
	for {
		if time.Since(lastTry) >= renewEvery-lookEvery/2 {
			lastTry = time.Now()
			if handed, err := c.cfg.Store.HoldHanded(ctx); err == nil && len(handed) > 0 {
				c.cfg.Logger.Info("holding the sessions handed to this host", "sessions", handed)
			}
			sent := time.Now()
			lost, err := c.cfg.Store.RenewLeases(ctx)
			switch {
			case err == nil:
				lastRenew = time.Now()
				c.renewed.Store(sent.UnixNano())
				if failing {
					c.cfg.Logger.Info("leases renewed again")
					failing = false
				}
				if len(lost) > 0 {
					c.cfg.Pool.Release(ctx, lost, "its lease was taken by another host")
				}
			case ctx.Err() != nil:
				return
			default:
				if !failing {
					c.cfg.Logger.Warn("renew leases", "err", err)
					failing = true
				}
				if time.Since(lastRenew) > c.cfg.TTL/2 {
					c.renewed.Store(0)
					if owned := c.cfg.Pool.Owned(); len(owned) > 0 {
						c.cfg.Pool.Release(ctx, owned, "its lease could not be renewed in time")
					}
				}
			}
		}
		if !c.Draining() && !failing && time.Since(started) >= c.cfg.StartGrace {
			c.takeOver(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
			wait.Reset(time.Until(time.Now().Truncate(lookEvery).Add(lookEvery)))
		}
	}
}

// takeOverEvery is the longest wait between two looks for expired leases.
const takeOverEvery = 500 * time.Millisecond

// takeOverLate is how long after this host first saw a lease expired it
// takes the session even when another host should have (that host is
// gone too, or slow).
const takeOverLate = 1500 * time.Millisecond

// takeOver takes this host's share of the sessions whose leases expired,
// all at once: each expired session goes to one survivor, chosen by
// rendezvous hashing over the live hosts that have its agent (the owners
// of expired leases, which stopped renewing, are not survivors), so that
// they spread over the survivors and no two race for one. A session its
// chosen host has not taken takeOverLate after this host saw it expired
// is taken by whoever looks next. The sessions taken get their fences
// claimed on their remotes (Config.Claimed), in the background.
func (c *Cluster) takeOver(ctx context.Context) {
	expired, err := c.cfg.Store.ExpiredLeases(ctx, 1000)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("list expired leases", "err", err)
		}
		return
	}
	now := time.Now()
	c.mu.Lock()
	live := make(map[string]bool, len(expired))
	for _, l := range expired {
		live[l.Session] = true
		if _, ok := c.seen[l.Session]; !ok {
			c.seen[l.Session] = now
		}
	}
	for id := range c.seen {
		if !live[id] {
			delete(c.seen, id)
			delete(c.dealt, id)
		}
	}
	seen := maps.Clone(c.seen)
	c.mu.Unlock()
	if len(expired) == 0 {
		return
	}
	stopped := map[string]bool{}
	for _, l := range expired {
		stopped[l.Owner] = true
	}
	var survivors []hosts.Status
	if list, err := c.hostList(ctx); err == nil {
		for _, h := range list {
			if h.Self || h.Alive && h.Capacity > 0 && !stopped[h.ID] {
				survivors = append(survivors, h)
			}
		}
	}
	// A session keeps the survivor it was first dealt to: dealt again
	// when others were taken meanwhile, it could go to another.
	deal := c.assign(expired, survivors)
	c.mu.Lock()
	chosen := make(map[string]string, len(expired))
	for _, l := range expired {
		if h, ok := c.dealt[l.Session]; ok {
			chosen[l.Session] = h
			continue
		}
		chosen[l.Session] = deal[l.Session]
		c.dealt[l.Session] = deal[l.Session]
	}
	c.mu.Unlock()
	var mine []Lease
	for _, l := range expired {
		if l.Agent != "" && !c.cfg.Providers(l.Agent) {
			continue
		}
		if chosen[l.Session] == c.cfg.Self || now.Sub(seen[l.Session]) >= takeOverLate {
			mine = append(mine, l)
		}
	}
	for _, l := range mine {
		if ctx.Err() != nil {
			return
		}
		if err := c.cfg.Store.TakeOver(ctx, l.Session); err != nil {
			c.cfg.Logger.Debug("take over a session", "session", l.Session, "from", l.Owner, "err", err)
			continue
		}
		c.cfg.Logger.Warn("session taken over from a host that stopped renewing its lease", "session", l.Session, "from", l.Owner)
		if c.cfg.Claimed != nil {
			c.claims.Add(1)
			go func() {
				defer c.claims.Done()
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				if err := c.cfg.Claimed(cctx, l.Session); err != nil && ctx.Err() == nil {
					c.cfg.Logger.Warn("fence a session taken over on its remote", "session", l.Session, "err", err)
				}
			}()
		}
	}
}

// assign gives each expired lease a survivor, the same on every host
// that sees the same leases and hosts: the sessions in the order of a
// hash of their ids, each to the survivor that has its agent (this host
// when none has) and was given the fewest so far, ties broken by a hash
// of the session and the host's id. The survivors get shares that differ
// by one at most.
func (c *Cluster) assign(expired []Lease, survivors []hosts.Status) map[string]string {
	order := slices.Clone(expired)
	key := func(s string) uint64 {
		sum := sha256.Sum256([]byte(s))
		return binary.BigEndian.Uint64(sum[:8])
	}
	slices.SortFunc(order, func(a, b Lease) int {
		if ka, kb := key(a.Session), key(b.Session); ka != kb {
			if ka < kb {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Session, b.Session)
	})
	given := map[string]int{}
	out := make(map[string]string, len(order))
	for _, l := range order {
		best, bestN, bestKey := c.cfg.Self, -1, uint64(0)
		for _, h := range survivors {
			if l.Agent != "" && !h.Self && !slices.Contains(h.Providers, l.Agent) {
				continue
			}
			if h.Self && l.Agent != "" && !c.cfg.Providers(l.Agent) {
				continue
			}
			n, k := given[h.ID], key(l.Session+"\x00"+h.ID)
			if bestN < 0 || n < bestN || n == bestN && k > bestKey {
				best, bestN, bestKey = h.ID, n, k
			}
		}
		given[best]++
		out[l.Session] = best
	}
	return out
}

// Drain hands every session this host owns to other hosts (placed as new
// sessions are), waiting for running turns to end, until none is left or
// ctx ends; it stops taking over and being placed first. It returns the
// sessions it could not move.
func (c *Cluster) Drain(ctx context.Context) []string {
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
	for {
		owned, err := c.cfg.Store.Owned(ctx)
		if err != nil {
			c.cfg.Logger.Warn("drain: list sessions", "err", err)
		}
		if len(owned) == 0 && err == nil {
			return nil
		}
		var left []string
		for _, l := range owned {
			to, self, err := c.Place(ctx, l.Agent, "")
			if err == nil && self {
				err = fmt.Errorf("%w: no other host", ErrNoHost)
			}
			if err == nil {
				_, err = c.cfg.Pool.Move(ctx, l.Session, to.ID, "drain")
			}
			if err != nil {
				left = append(left, l.Session)
				c.cfg.Logger.Info("drain: session not moved yet", "session", l.Session, "err", err)
			}
		}
		if len(left) == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return left
		case <-time.After(250 * time.Millisecond):
		}
		c.mu.Lock()
		c.listed = nil // a fresh listing: a host may have come
		c.mu.Unlock()
	}
}
