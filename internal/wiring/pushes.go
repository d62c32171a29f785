package wiring

import (
	"context"
	"sync"
)

// Pushes runs the pushes that follow checkpoints in the background, so
// that a turn's end does not wait for the network: one push at a time
// per session, a checkpoint taken while its session's push runs making
// one more push once it ends (however many were taken meanwhile). What
// needs the push done first (a close, a move, a merge) waits for it
// (Wait); the daemon waits for them all before it stops (WaitAll).
type Pushes struct {
	mu   sync.Mutex
	runs map[string]*pushRun
	wg   sync.WaitGroup
}

// pushRun is the background push of one session.
type pushRun struct {
	again bool
	done  chan struct{}
}

// NewPushes returns an empty set of background pushes.
func NewPushes() *Pushes { return &Pushes{runs: map[string]*pushRun{}} }

// start runs push for session in the background, or once more after the
// one running.
func (q *Pushes) start(session string, push func()) {
	q.mu.Lock()
	if r := q.runs[session]; r != nil {
		r.again = true
		q.mu.Unlock()
		return
	}
	r := &pushRun{done: make(chan struct{})}
	q.runs[session] = r
	q.wg.Add(1)
	q.mu.Unlock()
	go func() {
		defer q.wg.Done()
		for {
			push()
			q.mu.Lock()
			if !r.again {
				delete(q.runs, session)
				close(r.done)
				q.mu.Unlock()
				return
			}
			r.again = false
			q.mu.Unlock()
		}
	}()
}

// Wait waits until no push of session runs in the background (or ctx
// ends).
func (q *Pushes) Wait(ctx context.Context, session string) error {
	if q == nil {
		return nil
	}
	for {
		q.mu.Lock()
		r := q.runs[session]
		q.mu.Unlock()
		if r == nil {
			return nil
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitAll waits until no push runs in the background (or ctx ends).
func (q *Pushes) WaitAll(ctx context.Context) error {
	done := make(chan struct{})
	go func() { q.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
