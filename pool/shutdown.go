package pool

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Bounds of Close and Shutdown.
const (
	// ShutdownKillWait is how long Shutdown goes on after its context's
	// deadline: whatever still runs then is killed (SIGKILL to its process
	// group and its cgroup), and Shutdown waits for the kills and the
	// pool's goroutines until the deadline plus ShutdownKillWait at most.
	ShutdownKillWait = time.Second
	// shutdownTurnGrace is how long Shutdown lets running turns end after
	// cancelling them the protocol's way, before it stops their agents
	// (which ends the turns that ignored the cancel).
	shutdownTurnGrace = time.Second
	// closeTurnGrace is the same for Close and the turn of the session it
	// closes.
	closeTurnGrace = 3 * time.Second
)

// cancelTurns cancels the turns the protocol's way, in parallel, and waits
// up to grace (or until ctx ends) for them to end.
func cancelTurns(ctx context.Context, runs []*turnRun, grace time.Duration) {
	if len(runs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	var wg sync.WaitGroup
	for _, tr := range runs {
		wg.Add(1)
		go func() { defer wg.Done(); tr.requestCancel(ctx) }()
	}
	wg.Wait()
}

// awaitStart waits for the start of e, which stopEntry has cut short, to
// return. If ctx ends first, the backend being started is killed and the
// wait goes on until killDeadline(ctx). It reports whether the start has
// returned.
func (p *Pool) awaitStart(ctx context.Context, e *entry, started <-chan struct{}) bool {
	select {
	case <-started:
		return true
	case <-ctx.Done():
	}
	p.mu.Lock()
	b := e.launched
	p.mu.Unlock()
	if b != nil {
		_ = b.Stop(doneContext())
	}
	t := time.NewTimer(time.Until(killDeadline(ctx)))
	defer t.Stop()
	select {
	case <-started:
		return true
	case <-t.C:
		p.logger.Error("agent start did not end after its kill", "session", e.key.session, "agent", e.key.agent)
		return false
	}
}

// killDeadline is when waiting for kills ends once ctx has ended:
// ShutdownKillWait after ctx's deadline, or after now for a context
// without one.
func killDeadline(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl.Add(ShutdownKillWait)
	}
	return time.Now().Add(ShutdownKillWait)
}

// doneContext returns a context that has already ended: a backend's Stop
// under it skips the ladder and kills at once.
func doneContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// killRemaining kills at once, in parallel, every backend the pool still
// holds, running or being started, and waits for the kills. It returns
// how many of them were still running.
func (p *Pool) killRemaining() int {
	p.mu.Lock()
	var list []backends.Backend
	for _, e := range p.entries {
		if e.backend != nil {
			list = append(list, e.backend)
		}
		if e.launched != nil {
			list = append(list, e.launched)
		}
	}
	p.mu.Unlock()
	n := 0
	var wg sync.WaitGroup
	for _, b := range list {
		select {
		case <-b.Done():
			continue
		default:
		}
		n++
		wg.Add(1)
		go func() { defer wg.Done(); _ = b.Stop(doneContext()) }()
	}
	wg.Wait()
	return n
}

// awaitGoroutines waits for the pool's goroutines. If ctx ends first, it
// kills every backend still running and waits for the kills and the
// goroutines until killDeadline(ctx); goroutines that have not ended by
// then are left behind and reported in the error.
func (p *Pool) awaitGoroutines(ctx context.Context) error {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	killed := make(chan int, 1)
	go func() { killed <- p.killRemaining() }()
	t := time.NewTimer(time.Until(killDeadline(ctx)))
	defer t.Stop()
	n := -1
	for n < 0 || done != nil {
		select {
		case n = <-killed:
			if n > 0 {
				p.logger.Warn("shutdown deadline passed: killed the agents still running", "count", n)
			}
		case <-done:
			done = nil
		case <-t.C:
			return fmt.Errorf("the pool's goroutines had not ended %s after the deadline: %w", ShutdownKillWait, context.Cause(ctx))
		}
	}
	return nil
}
