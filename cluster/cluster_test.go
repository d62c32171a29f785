package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentpool/agentpool/hosts"
	"github.com/agentpool/agentpool/pool"
)

// The cluster's decisions are tested here over a store and hosts kept in
// memory; the end-to-end test (cmd/agentpool TestEndToEndCluster) runs
// them over PostgreSQL with three daemons.

type memStore struct {
	mu      sync.Mutex
	self    string
	leases  map[string]Lease
	held    map[string]bool
	reads   int
	taken   []string
	renewed int
	lost    []string
	failing error
	// handedCalls counts HoldHanded.
	handedCalls int
}

func (m *memStore) Lease(_ context.Context, s string) (Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	l, ok := m.leases[s]
	if !ok {
		return Lease{}, fmt.Errorf("session %q: %w", s, pool.ErrNotFound)
	}
	return l, nil
}

func (m *memStore) RenewLeases(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return nil, m.failing
	}
	m.renewed++
	lost := m.lost
	m.lost = nil
	return lost, nil
}

func (m *memStore) ExpiredLeases(context.Context, int) ([]Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Lease
	for _, l := range m.leases {
		if l.Open && l.Owner != m.self && time.Now().After(l.Expires) {
			out = append(out, l)
		}
	}
	return out, nil
}

func (m *memStore) TakeOver(_ context.Context, s string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[s]
	if !time.Now().After(l.Expires) {
		return errors.New("held")
	}
	l.Owner, l.Epoch, l.Expires = m.self, l.Epoch+1, time.Now().Add(time.Minute)
	m.leases[s] = l
	m.taken = append(m.taken, s)
	return nil
}

func (m *memStore) Owned(context.Context) ([]Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Lease
	for _, l := range m.leases {
		if l.Open && l.Owner == m.self {
			out = append(out, l)
		}
	}
	return out, nil
}

func (m *memStore) HoldHanded(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.handedCalls++
	return nil, nil
}

func (m *memStore) Holds(s string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held[s]
}

type memHosts []hosts.Status

func (h memHosts) List(context.Context) ([]hosts.Status, error) { return h, nil }

type memPool struct {
	mu       sync.Mutex
	released []string
	moves    []string
	st       *memStore
}

func (p *memPool) Release(_ context.Context, ids []string, _ string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.released = append(p.released, ids...)
}

func (p *memPool) Move(_ context.Context, id, to, reason string) (pool.MoveResult, error) {
	p.mu.Lock()
	p.moves = append(p.moves, id+">"+to+":"+reason)
	p.mu.Unlock()
	p.st.mu.Lock()
	l := p.st.leases[id]
	l.Owner = to
	p.st.leases[id] = l
	p.st.mu.Unlock()
	return pool.MoveResult{Session: id, From: p.st.self, To: to}, nil
}

func (p *memPool) Owned() []string { return []string{"held-1"} }

func host(id string, self, alive bool, capacity, warm int, providers ...string) hosts.Status {
	return hosts.Status{Host: hosts.Host{ID: id, Advertise: "http://" + id, Capacity: capacity, Warm: warm, Providers: providers},
		Alive: alive, Self: self}
}

func newTestCluster(t *testing.T, st *memStore, list memHosts, providers ...string) (*Cluster, *memPool) {
	t.Helper()
	p := &memPool{st: st}
	c, err := New(Config{Self: st.self, Store: st, Hosts: list, Pool: p, TTL: 30 * time.Millisecond,
		Providers: func(a string) bool {
			for _, x := range providers {
				if x == a {
					return true
				}
			}
			return false
		}})
	if err != nil {
		t.Fatal(err)
	}
	return c, p
}

func TestPlace(t *testing.T) {
	st := &memStore{self: "a", leases: map[string]Lease{}}
	list := memHosts{
		host("a", true, true, 16, 10, "demo"),
		host("b", false, true, 16, 2, "demo"),
		host("c", false, true, 16, 0, "other"),
		host("d", false, false, 16, 0, "demo"),
		host("e", false, true, 0, 0, "demo"), // draining
	}
	c, _ := newTestCluster(t, st, list, "demo")
	ctx := context.Background()
	if h, self, err := c.Place(ctx, "demo", ""); err != nil || h.ID != "b" || self {
		t.Errorf("Place(demo) = %+v %v %v; want b, the live host with the agent and the most room", h, self, err)
	}
	if h, _, err := c.Place(ctx, "other", ""); err != nil || h.ID != "c" {
		t.Errorf("Place(other) = %+v %v; want c, the only host that has it", h, err)
	}
	if _, _, err := c.Place(ctx, "nobody", ""); !errors.Is(err, ErrNoHost) {
		t.Errorf("Place(nobody) error = %v; want ErrNoHost", err)
	}
	if h, self, err := c.Place(ctx, "demo", "a"); err != nil || h.ID != "a" || !self {
		t.Errorf("Place(demo, want a) = %+v %v %v; want a, itself", h, self, err)
	}
	for _, want := range []string{"d", "e", "c"} {
		if _, _, err := c.Place(ctx, "demo", want); !errors.Is(err, ErrHostDown) {
			t.Errorf("Place(demo, want %s) error = %v; want ErrHostDown (dead, draining, without the agent)", want, err)
		}
	}
	if _, _, err := c.Place(ctx, "demo", "zz"); !errors.Is(err, ErrUnknownHost) {
		t.Errorf("Place(demo, want zz) error = %v; want ErrUnknownHost", err)
	}
	// A burst of placements within one listing spreads: what was placed
	// counts until the hosts' next heartbeats.
	even := memHosts{host("a", true, true, 16, 0, "demo"), host("b", false, true, 16, 0, "demo"), host("c", false, true, 16, 0, "demo")}
	c3, _ := newTestCluster(t, st, even, "demo")
	count := map[string]int{}
	for range 9 {
		h, _, err := c3.Place(ctx, "demo", "")
		if err != nil {
			t.Fatal(err)
		}
		count[h.ID]++
	}
	if count["a"] != 3 || count["b"] != 3 || count["c"] != 3 {
		t.Errorf("9 placements in a burst went %v; want 3 on each host", count)
	}
	// A tie goes to the host that asks.
	tie := memHosts{host("a", true, true, 16, 4, "demo"), host("b", false, true, 16, 4, "demo")}
	c2, _ := newTestCluster(t, st, tie, "demo")
	if h, self, _ := c2.Place(ctx, "demo", ""); h.ID != "a" || !self {
		t.Errorf("Place on a tie = %+v; want itself", h)
	}
}

func TestOwner(t *testing.T) {
	future, past := time.Now().Add(time.Minute), time.Now().Add(-time.Second)
	st := &memStore{self: "a", leases: map[string]Lease{
		"mine":   {Session: "mine", Owner: "a", Open: true, Expires: future},
		"theirs": {Session: "theirs", Owner: "b", Open: true, Expires: future},
		"dead":   {Session: "dead", Owner: "d", Open: true, Expires: past},
		"closed": {Session: "closed", Owner: "d", Open: false, Expires: past},
	}}
	c, _ := newTestCluster(t, st, memHosts{host("a", true, true, 16, 0), host("b", false, true, 16, 0), host("d", false, false, 16, 0)})
	ctx := context.Background()
	for _, tc := range []struct {
		session string
		want    string
		self    bool
		err     error
	}{
		{"mine", "a", true, nil},
		{"theirs", "b", false, nil},
		{"dead", "d", false, ErrSessionMoving},
		{"closed", "a", true, nil},
		{"unknown", "a", true, nil},
	} {
		h, self, err := c.Owner(ctx, tc.session)
		if h.ID != tc.want || self != tc.self || !errors.Is(err, tc.err) || (err == nil && !self && h.Advertise != "http://"+tc.want) {
			t.Errorf("Owner(%s) = %+v self %v err %v; want %s self %v err %v", tc.session, h, self, err, tc.want, tc.self, tc.err)
		}
	}
}

// TestOwnerHeld: a session whose lease this host holds is its own without
// a read of the database while its leases were renewed less than half the
// TTL ago; once renewals fail longer, or the lease is no longer held,
// Owner reads the lease again.
func TestOwnerHeld(t *testing.T) {
	future := time.Now().Add(time.Minute)
	st := &memStore{self: "a", held: map[string]bool{"mine": true}, leases: map[string]Lease{
		"mine":   {Session: "mine", Owner: "a", Open: true, Expires: future},
		"theirs": {Session: "theirs", Owner: "b", Open: true, Expires: future},
	}}
	c, _ := newTestCluster(t, st, memHosts{host("a", true, true, 16, 0), host("b", false, true, 16, 0)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "a renewal", func() bool { st.mu.Lock(); defer st.mu.Unlock(); return st.renewed > 0 })
	reads := func() int { st.mu.Lock(); defer st.mu.Unlock(); return st.reads }
	before := reads()
	if h, self, err := c.Owner(ctx, "mine"); !self || h.ID != "a" || err != nil {
		t.Fatalf("Owner(mine) = %+v %v %v; want this host", h, self, err)
	}
	if n := reads() - before; n != 0 {
		t.Errorf("Owner of a held session read the lease %d times; want none", n)
	}
	if h, self, _ := c.Owner(ctx, "theirs"); self || h.ID != "b" || reads() == before {
		t.Errorf("Owner(theirs) = %+v self %v after %d reads; want b, read from the store", h, self, reads()-before)
	}
	// Renewals failing: past half the TTL the lease is read again (and
	// the database says whose it is).
	st.mu.Lock()
	st.failing = errors.New("database unreachable")
	st.leases["mine"] = Lease{Session: "mine", Owner: "b", Open: true, Expires: future}
	st.mu.Unlock()
	waitFor(t, "Owner to read the lease again", func() bool {
		h, self, _ := c.Owner(ctx, "mine")
		return !self && h.ID == "b"
	})
	// Renewing again, but the lease no longer held: read.
	st.mu.Lock()
	st.failing = nil
	st.held["mine"] = false
	st.mu.Unlock()
	waitFor(t, "renewals again", func() bool { return c.renewed.Load() != 0 })
	if h, self, _ := c.Owner(ctx, "mine"); self || h.ID != "b" {
		t.Errorf("Owner of a session no longer held = %+v self %v; want b", h, self)
	}
}

func TestKnownToken(t *testing.T) {
	sum := sha256.Sum256([]byte("token-of-b"))
	b := host("b", false, true, 16, 0)
	b.TokenSHA256 = hex.EncodeToString(sum[:])
	dead := host("d", false, false, 16, 0)
	dsum := sha256.Sum256([]byte("token-of-dead"))
	dead.TokenSHA256 = hex.EncodeToString(dsum[:])
	c, _ := newTestCluster(t, &memStore{self: "a"}, memHosts{host("a", true, true, 16, 0), b, dead})
	ctx := context.Background()
	if !c.KnownToken(ctx, "token-of-b") {
		t.Error("the token of live host b is refused")
	}
	for _, tok := range []string{"", "token-of-c", "token-of-dead", b.TokenSHA256} {
		if c.KnownToken(ctx, tok) {
			t.Errorf("KnownToken(%q) = true; want false", tok)
		}
	}
}

// TestTakeOverShare: of the expired sessions of a dead host, a live host
// takes those of agents it has, at most its share, once.
// TestTakeOverShare: the sessions of a dead host are spread over the
// survivors in one wave, each taking those the hash gives it (never a
// session of an agent it lacks); a session its chosen survivor did not
// take in time is taken by another.
func TestTakeOverShare(t *testing.T) {
	past := time.Now().Add(-time.Second)
	st := &memStore{self: "a", leases: map[string]Lease{}}
	const n = 40
	for i := range n {
		id := fmt.Sprint("s", i)
		st.leases[id] = Lease{Session: id, Owner: "d", Open: true, Expires: past, Agent: "demo"}
	}
	st.leases["x"] = Lease{Session: "x", Owner: "d", Open: true, Expires: past, Agent: "other"}
	list := memHosts{host("a", true, true, 16, 0, "demo"), host("b", false, true, 16, 0, "demo", "other"), host("d", false, false, 16, 0, "demo")}
	c, _ := newTestCluster(t, st, list, "demo")
	c.takeOver(context.Background())
	if len(st.taken) != n/2 {
		t.Errorf("took %d sessions in the first wave; want its share, %d of %d", len(st.taken), n/2, n)
	}
	// b, seeing the same, gives itself the others.
	cb, _ := newTestCluster(t, &memStore{self: "b", leases: st.leases}, memHosts{host("a", false, true, 16, 0, "demo"), host("b", true, true, 16, 0, "demo", "other"), list[2]}, "demo", "other")
	var all []Lease
	for _, l := range st.leases {
		all = append(all, l)
	}
	ga := c.assign(all, list[:2])
	gb := cb.assign(all, memHosts{host("a", false, true, 16, 0, "demo"), host("b", true, true, 16, 0, "demo", "other")})
	if diff := cmp.Diff(ga, gb); diff != "" {
		t.Errorf("a and b assign differently (-a +b):\n%s", diff)
	}
	if ga["x"] != "b" {
		t.Errorf("x (agent other) assigned to %s; want b, the one that has its agent", ga["x"])
	}
	for _, s := range st.taken {
		if s == "x" {
			t.Error("took a session of an agent this host does not have")
		}
	}
	// b did not take its share: once late, a takes it.
	c.mu.Lock()
	for id := range c.seen {
		c.seen[id] = time.Now().Add(-takeOverLate)
	}
	c.mu.Unlock()
	c.takeOver(context.Background())
	if len(st.taken) != n {
		t.Errorf("after b's share was late took %d; want every demo session (%d)", len(st.taken), n)
	}
}

// TestStartGrace: a host that just started takes nothing over for its
// grace (the other hosts of a cluster that starts again claim their own
// sessions), then takes the expired ones; it holds the sessions handed to
// it at each renewal.
func TestStartGrace(t *testing.T) {
	st := &memStore{self: "a", leases: map[string]Lease{
		"s1": {Session: "s1", Owner: "d", Open: true, Expires: time.Now().Add(-time.Second), Agent: "demo"},
	}}
	p := &memPool{st: st}
	c, err := New(Config{Self: "a", Store: st, Hosts: memHosts{host("a", true, true, 16, 0, "demo")}, Pool: p,
		TTL: 30 * time.Millisecond, StartGrace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); c.Run(ctx) }()
	waitFor(t, "the take-over", func() bool { st.mu.Lock(); defer st.mu.Unlock(); return len(st.taken) == 1 })
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("took the session over %v after start; want after the grace of 300ms", d)
	}
	st.mu.Lock()
	calls := st.handedCalls
	st.mu.Unlock()
	if calls < 2 {
		t.Errorf("HoldHanded called %d times; want at each renewal", calls)
	}
	cancel()
	<-done
}

// TestPlaceSkipsUnprovenHosts: a host that does not prove it holds the
// cluster's key is placed nothing, asked for or not.
func TestPlaceSkipsUnprovenHosts(t *testing.T) {
	st := &memStore{self: "a", leases: map[string]Lease{}}
	list := memHosts{host("a", true, true, 16, 16, "demo"), host("b", false, true, 16, 0, "demo"), host("c", false, true, 16, 0, "demo")}
	asked := map[string]int{}
	var mu sync.Mutex
	c, err := New(Config{Self: "a", Store: st, Hosts: list, Pool: &memPool{st: st}, Providers: func(string) bool { return true },
		Verify: func(_ context.Context, h Host) error {
			mu.Lock()
			defer mu.Unlock()
			asked[h.ID]++
			if h.ID == "b" {
				return errors.New("wrong cluster key")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if h, _, err := c.Place(context.Background(), "demo", ""); err != nil || h.ID != "c" {
			t.Errorf("Place() = %+v, %v; want c (b did not prove its key, a is full)", h, err)
		}
	}
	if _, _, err := c.Place(context.Background(), "demo", "b"); !errors.Is(err, ErrHostDown) {
		t.Errorf("Place(b) error = %v; want ErrHostDown", err)
	}
	if asked["b"] != 1 || asked["c"] != 1 {
		t.Errorf("hosts asked %v; want each once", asked)
	}
}

// TestRunReleases: leases lost are released; when renewals fail for half
// the TTL, every session held is released before the leases run out.
func TestRunReleases(t *testing.T) {
	st := &memStore{self: "a", leases: map[string]Lease{}, lost: []string{"lost-1"}}
	c, p := newTestCluster(t, st, memHosts{host("a", true, true, 16, 0)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	waitFor(t, "the lost lease released", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.released) == 1 })
	st.mu.Lock()
	st.failing = errors.New("database unreachable")
	st.mu.Unlock()
	waitFor(t, "the held sessions released", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.released) >= 2 && p.released[1] == "held-1"
	})
	cancel()
	<-done
}

func TestDrain(t *testing.T) {
	future := time.Now().Add(time.Minute)
	st := &memStore{self: "a", leases: map[string]Lease{
		"s1": {Session: "s1", Owner: "a", Open: true, Expires: future, Agent: "demo"},
		"s2": {Session: "s2", Owner: "a", Open: true, Expires: future, Agent: "demo"},
	}}
	c, p := newTestCluster(t, st, memHosts{host("a", true, true, 16, 0, "demo"), host("b", false, true, 16, 8, "demo")}, "demo")
	if left := c.Drain(context.Background()); len(left) != 0 {
		t.Fatalf("Drain left %v", left)
	}
	if len(p.moves) != 2 || !c.Draining() {
		t.Errorf("moves %v draining %v; want both sessions moved to b, for drain", p.moves, c.Draining())
	}
	for _, m := range p.moves {
		if m != "s1>b:drain" && m != "s2>b:drain" {
			t.Errorf("move %s; want to b for drain", m)
		}
	}
	// Draining, it is placed no session.
	if h, _, err := c.Place(context.Background(), "demo", ""); err != nil || h.ID != "b" {
		t.Errorf("Place while draining = %+v, %v; want b", h, err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
