package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/pool"
)

// newSpareEnv is newEnv keeping one spare of the fake provider for the
// test repository, checked every interval, with the pool running (Run)
// until the test ends; wrap, when set, wraps the pool's store.
func newSpareEnv(t *testing.T, interval time.Duration, wrap func(pool.Store) pool.Store) *env {
	t.Helper()
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, nil)
	e.cfg.Spares = pool.SparesConfig{
		Repos:     func(context.Context) []string { return []string{e.repo} },
		Providers: func() map[string]int { return map[string]int{"fake": 1} },
		Git:       wiring.SpareGit{M: e.wt},
		Interval:  interval,
	}
	e.wrapStore = wrap
	e.shutdown()
	e.open()
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = e.p.Run(ctx) }()
	t.Cleanup(func() { stop(); <-ran })
	return e
}

// An adopted spare's replacement is made RefillDelay after the adoption,
// not at once (it would take the CPUs from the session's first turn) nor
// at the next periodic check.
func TestAdoptedSpareIsReplacedAfterRefillDelay(t *testing.T) {
	e := newSpareEnv(t, time.Hour, nil) // only the first check and the wakes make spares
	ready := func() []pool.SpareStatus {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if ss := e.p.Spares(); len(ss) == 1 && ss[0].State == "ready" {
				return ss
			}
			if time.Now().After(deadline) {
				t.Fatalf("no ready spare; spares = %+v", e.p.Spares())
			}
		}
	}
	first := ready()[0]
	adopted := time.Now()
	s, err := e.p.Create(context.Background(), pool.CreateRequest{Repo: e.repo, Agent: "fake"})
	if err != nil || s.ID != first.ID {
		t.Fatalf("Create = %s, %v; want the spare %s adopted", s.ID, err, first.ID)
	}
	var next pool.SpareStatus
	for deadline := time.Now().Add(30 * time.Second); next.ID == ""; time.Sleep(5 * time.Millisecond) {
		if ss := e.p.Spares(); len(ss) == 1 {
			next = ss[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("the adopted spare was not replaced")
		}
	}
	if d := next.CreatedAt.Sub(adopted); d < pool.RefillDelay {
		t.Errorf("replacement made %v after the adoption; want RefillDelay (%v) or more", d, pool.RefillDelay)
	}
	ready()
}
