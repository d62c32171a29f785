package store

import "sync"

// waitState is where a waited write stands.
type waitState int

const (
	// waitPending: queued, or its last attempt failed (err says why).
	waitPending waitState = iota
	// waitWriting: in a transaction that has not ended yet.
	waitWriting
	// waitDone: committed.
	waitDone
	// waitRejected: refused by the database for itself (err says why).
	waitRejected
	// waitAbandoned: its caller gave up on it; it is never written.
	waitAbandoned
	// waitDropped: the store closed before it could be written.
	waitDropped
)

// waited follows a queued write whose caller waits for its outcome. The
// writer claims it before each attempt and reports the attempt's end; the
// caller may abandon it only while it is not in an attempt, so a write is
// either committed or never written, never both, and the caller knows which.
type waited struct {
	mu      sync.Mutex
	state   waitState
	err     error
	result  int64         // what a RETURNING write returned, once done
	changed chan struct{} // cap 1: poked on every change
}

func newWaited() *waited { return &waited{changed: make(chan struct{}, 1)} }

// claim moves a pending write into an attempt; it reports false for an
// abandoned (or already settled) write, which the attempt must skip.
func (w *waited) claim() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != waitPending {
		return false
	}
	w.state = waitWriting
	return true
}

// set records the end of an attempt (or the store's giving up) unless the
// caller abandoned the write, and wakes the caller.
func (w *waited) set(state waitState, err error) {
	w.mu.Lock()
	if w.state != waitAbandoned && w.state != waitDone && w.state != waitRejected {
		w.state, w.err = state, err
	}
	w.mu.Unlock()
	poke(w.changed)
}

// done records that the write committed, with what it returned (see
// write.returning), unless the caller abandoned it.
func (w *waited) done(result int64) {
	w.mu.Lock()
	if w.state != waitAbandoned && w.state != waitDone && w.state != waitRejected {
		w.state, w.err, w.result = waitDone, nil, result
	}
	w.mu.Unlock()
	poke(w.changed)
}

// abandon gives up on a write that is not in an attempt; it reports false
// when the write is in one (wait for its end) or settled.
func (w *waited) abandon() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != waitPending {
		return false
	}
	w.state = waitAbandoned
	return true
}

// get returns the state and error.
func (w *waited) get() (waitState, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state, w.err
}

// value returns what a committed RETURNING write returned.
func (w *waited) value() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.result
}
