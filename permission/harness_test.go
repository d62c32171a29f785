package permission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testWait bounds every wait of a test for something that must happen; it is
// a safety net against hangs, never a measured duration.
const testWait = 10 * time.Second

// fakeClock is a manual clock: timers fire only on Advance.
type fakeClock struct {
	mu        sync.Mutex
	now       time.Time
	timers    []fakeTimer
	durations []time.Duration
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), ch: ch})
	c.durations = append(c.durations, d)
	return ch
}

// Advance moves the clock by d and fires every timer that is due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			keep = append(keep, t)
			continue
		}
		t.ch <- c.now
	}
	c.timers = keep
}

// harness is a Broker on a fake clock that collects what it reports.
type harness struct {
	clock     *fakeClock
	b         *Broker
	requested chan Pending
	ids       atomic.Int64
	wg        sync.WaitGroup

	mu      sync.Mutex
	records []Record
}

func newHarness(t testing.TB, cfg Config) *harness {
	h := &harness{clock: newFakeClock(), requested: make(chan Pending, 64)}
	cfg.Now, cfg.After = h.clock.Now, h.clock.After
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.OnRequested = func(p Pending) { h.requested <- p }
	cfg.OnResolved = func(r Record) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.records = append(h.records, r)
	}
	if cfg.NewID == nil {
		cfg.NewID = func() string { return fmt.Sprintf("req-%d", h.ids.Add(1)) }
	}
	h.b = NewBroker(cfg)
	t.Cleanup(func() {
		h.b.Close()
		h.wg.Wait()
	})
	return h
}

// call is a Request running on its own goroutine.
type call struct {
	done chan struct{}
	out  Outcome
	err  error
}

func (h *harness) start(ctx context.Context, req Request) *call {
	c := &call{done: make(chan struct{})}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer close(c.done)
		c.out, c.err = h.b.Request(ctx, req)
	}()
	return c
}

func (c *call) wait(t testing.TB) Outcome {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(testWait):
		t.Fatalf("Request did not return within %s", testWait)
	}
	if c.err != nil {
		t.Fatalf("Request error = %v; want nil", c.err)
	}
	return c.out
}

func (c *call) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// ask starts req and waits until it is pending.
func (h *harness) ask(t testing.TB, req Request) (*call, Pending) {
	t.Helper()
	c := h.start(context.Background(), req)
	return c, h.nextPending(t)
}

func (h *harness) nextPending(t testing.TB) Pending {
	t.Helper()
	select {
	case p := <-h.requested:
		return p
	case <-time.After(testWait):
		t.Fatalf("no permission.requested within %s", testWait)
		return Pending{}
	}
}

func (h *harness) recordsOf(id string) []Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var rs []Record
	for _, r := range h.records {
		if r.ID == id {
			rs = append(rs, r)
		}
	}
	return rs
}

// agentOptions are options whose ids lie about their kinds: a broker that
// chose by id would pick the wrong one.
func agentOptions() []Option {
	return []Option{
		{ID: "allow_once", Name: "No", Kind: KindRejectOnce},
		{ID: "proceed_always", Name: "Always", Kind: KindAllowAlways},
		{ID: "proceed_once", Name: "Yes", Kind: KindAllowOnce},
		{ID: "reject_once", Name: "Never", Kind: KindRejectAlways},
	}
}

func onlyKinds(kinds ...string) []Option {
	var opts []Option
	for _, o := range agentOptions() {
		for _, k := range kinds {
			if o.Kind == k {
				opts = append(opts, o)
			}
		}
	}
	return opts
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
