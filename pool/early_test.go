package pool_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/pool"
)

// earlyRec is what earlyLauncher starts early for a session.
type earlyRec struct {
	session string
	mu      sync.Mutex
	closes  int
}

func (r *earlyRec) Close() {
	r.mu.Lock()
	r.closes++
	r.mu.Unlock()
}

func (r *earlyRec) closed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closes
}

// earlyLauncher is an EarlyLauncher over the env's launcher: it records
// what it started early, and which launch was given what. Like the real
// one, Launch ends what it is given and does not use.
type earlyLauncher struct {
	pool.Launcher
	mu       sync.Mutex
	started  []*earlyRec
	launches []pool.LaunchRequest
}

func (l *earlyLauncher) LaunchEarly(spec backends.Spec, session string) (pool.Early, bool) {
	r := &earlyRec{session: session}
	l.mu.Lock()
	l.started = append(l.started, r)
	l.mu.Unlock()
	return r, true
}

func (l *earlyLauncher) Launch(req pool.LaunchRequest) (backends.Backend, error) {
	l.mu.Lock()
	l.launches = append(l.launches, req)
	l.mu.Unlock()
	if req.Early != nil {
		req.Early.Close()
		req.Early = nil
	}
	return l.Launcher.Launch(req)
}

// seen returns what was started early and what each launch was given.
func (l *earlyLauncher) seen() (started []*earlyRec, given []pool.Early) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, req := range l.launches {
		given = append(given, req.Early)
	}
	return slices.Clone(l.started), given
}

// TestEarlyLaunchReachesTheFirstStart: a session created warm without a
// spare has its agent's launch started early, and its first start is
// given it; one created cold starts nothing early. What no start takes —
// the create failed, the warm-up found no free slot — is ended, once.
func TestEarlyLaunchReachesTheFirstStart(t *testing.T) {
	e := newEnv(t, map[string]any{"fake": providerEntry(echo)}, func(c *pool.Config) { c.MaxWarm = 1 })
	l := &earlyLauncher{Launcher: wiring.Launcher{}}
	e.shutdown()
	e.launcher = l
	e.open()

	warm := e.create("fake", true)
	e.waitEvent(warm.ID, backends.EventAgentReady)
	started, given := l.seen()
	if len(started) != 1 || started[0].session != warm.ID {
		t.Fatalf("started early %v; want one, for session %s", sessionsOf(started), warm.ID)
	}
	if len(given) != 1 || given[0] != pool.Early(started[0]) {
		t.Fatalf("launches were given %v; want the first given what was started early", given)
	}
	if n := started[0].closed(); n != 1 {
		t.Errorf("what the launch was given was closed %d times by it; want once", n)
	}

	// Cold: nothing early, and its first prompt's start is given nothing.
	cold := e.create("fake", false)
	e.prompt(cold.ID, "", "hello")
	started, given = l.seen()
	if len(started) != 1 || len(given) != 2 || given[1] != nil {
		t.Fatalf("after a cold session's prompt: started early %v, launches given %v; want nothing more early", sessionsOf(started), given)
	}

	// The create fails after the early start: it is ended.
	if _, err := e.p.Create(context.Background(), pool.CreateRequest{Repo: e.repo, Agent: "fake", BaseRef: "no-such-ref"}); err == nil {
		t.Fatal("Create at a missing ref succeeded")
	}
	started, _ = l.seen()
	if len(started) != 2 || started[1].closed() != 1 {
		t.Fatalf("after a failed create: started early %v, the last closed %d times; want it closed once", sessionsOf(started), started[len(started)-1].closed())
	}

	// No free slot (the cold session's idle agent holds the only one):
	// the warm-up is skipped, and what was started early ended.
	skipped := e.create("fake", true)
	e.waitEvent(skipped.ID, pool.EventAgentWarmSkipped)
	started, given = l.seen()
	if len(started) != 3 || started[2].session != skipped.ID {
		t.Fatalf("started early %v; want the third for %s", sessionsOf(started), skipped.ID)
	}
	waitUntil(t, "what the skipped warm-up's session had started early is ended", func() bool { return started[2].closed() == 1 })
	if len(given) != 2 {
		t.Errorf("launches %d after a skipped warm-up; want no new one", len(given))
	}
}

func sessionsOf(rs []*earlyRec) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.session)
	}
	return out
}
