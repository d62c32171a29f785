package pool

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// DefaultMaxQueued is how many prompts may wait for a backend slot at
// once. A prompt past it is refused with ErrAtCapacity.
const DefaultMaxQueued = 256

// Events of a turn that waits for a backend slot. A turn that cannot start
// its agent at once because every slot is busy is published as
// turn.started, then turn.queued (data: turn, position, max_warm); when it
// gets its slot, turn.dequeued (data: turn, waited_ms) and then its
// agent's agent.starting. A queued turn that is cancelled, whose session
// closes, or whose pool shuts down ends with turn.ended (stop reason
// cancelled, data reason) without running.
const (
	EventTurnQueued   backends.EventType = "turn.queued"
	EventTurnDequeued backends.EventType = "turn.dequeued"
)

// slotQueue is the FIFO of turns waiting for a backend slot. Its fields
// are guarded by Pool.mu.
//
// Fairness: while anyone waits, makeRoomLocked refuses every caller but
// the waiter being served, so a newcomer cannot take a slot that frees
// up. When a turn ends, release serves the queue in the same hold of
// Pool.mu that frees the backend: the least recently used idle backend
// (usually the one just released) is evicted and its slot reserved for
// the first waiter. A session whose backend was evicted so queues again
// behind everyone who waited before it.
//
// A reserved slot counts as a warm backend until its waiter acquires it
// (or is cancelled). The waiter's goroutine, started once turn.queued is
// published, publishes turn.dequeued and then acquires, so the events
// come as turn.queued, turn.dequeued, agent.starting.
type slotQueue struct {
	waiters  []*slotWaiter
	max      int  // 0 means DefaultMaxQueued
	granting bool // the caller of makeRoomLocked is the waiter being served
	reserved int  // slots granted to waiters that have not acquired them yet

	queuedTotal int64
	maxWait     time.Duration
}

// slotWaiter is one queued turn.
type slotWaiter struct {
	s        *session
	agent    string
	turn     int64
	position int
	queuedAt time.Time

	// ready is closed when the waiter is served: granted, with a slot
	// reserved, or with its warm backend e handed over, or with err.
	ready     chan struct{}
	granted   bool
	reserved  bool
	e         *entry
	err       error
	grantedAt time.Time
}

func (q *slotQueue) limit() int {
	if q.max > 0 {
		return q.max
	}
	return DefaultMaxQueued
}

// queueFullLocked refuses a prompt when the queue is full.
func (p *Pool) queueFullLocked() error {
	if n := len(p.slots.waiters); n >= p.slots.limit() {
		return fmt.Errorf("%w: %d prompts already wait for one of the %d backend slots; try again later", ErrAtCapacity, n, p.cfg.MaxWarm)
	}
	return nil
}

// acquireOrQueueLocked reserves the backend of (s, agent) for turn, or,
// when every slot is busy or taken by waiters, puts the turn at the end of
// the queue and returns its waiter with its position (1 is next).
func (p *Pool) acquireOrQueueLocked(s *session, agent string, turn int64) (*entry, *slotWaiter, int, error) {
	e, err := p.acquireLocked(s, agent)
	// ErrBusy: a Warm of the same backend holds it; the turn waits for it
	// like for a slot, and gets it when the Warm releases it.
	if !errors.Is(err, ErrAtCapacity) && !errors.Is(err, ErrBusy) {
		return e, nil, 0, err
	}
	if ferr := p.queueFullLocked(); ferr != nil {
		return nil, nil, 0, ferr
	}
	w := &slotWaiter{s: s, agent: agent, turn: turn, queuedAt: p.cfg.Now(), ready: make(chan struct{})}
	p.slots.waiters = append(p.slots.waiters, w)
	p.slots.queuedTotal++
	w.position = len(p.slots.waiters)
	return nil, w, w.position, nil
}

// waitersAheadLocked is makeRoomLocked's fairness check: a caller that is
// not the waiter being served gets ErrAtCapacity while others wait.
func (p *Pool) waitersAheadLocked() error {
	if n := len(p.slots.waiters); n > 0 && !p.slots.granting {
		return fmt.Errorf("%w: %d prompts wait for a backend slot before this one (max_warm %d)", ErrAtCapacity, n, p.cfg.MaxWarm)
	}
	return nil
}

// serveQueueLocked gives free or freeable slots to the waiters, first come
// first served, and stops at the first waiter that finds no room. A waiter
// whose own backend is warm and idle gets it handed over; one whose
// backend is held (by a Warm of the same agent) keeps its place and is
// served when that is released.
func (p *Pool) serveQueueLocked() {
	q := &p.slots
	for i := 0; i < len(q.waiters); {
		w := q.waiters[i]
		cur := p.entries[key{w.s.id, w.agent}]
		if cur != nil && cur.inUse {
			i++
			continue
		}
		q.granting = true
		if cur != nil && cur.warmLocked() {
			w.e, w.err = p.acquireLocked(w.s, w.agent)
		} else if err := p.makeRoomLocked(); err == nil {
			w.reserved = true
			q.reserved++
		} else {
			q.granting = false
			return
		}
		q.granting = false
		q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
		w.granted = true
		w.grantedAt = p.cfg.Now()
		if d := w.grantedAt.Sub(w.queuedAt); d > q.maxWait {
			q.maxWait = d
		}
		close(w.ready)
	}
}

// requeueLocked puts a served waiter back at the head of the queue, when
// the slot it was given is gone by the time it acquires (the memory budget
// moved, or a Warm took its backend).
func (p *Pool) requeueLocked(w *slotWaiter) {
	w.granted, w.reserved, w.e, w.err = false, false, nil, nil
	w.ready = make(chan struct{})
	p.slots.waiters = append([]*slotWaiter{w}, p.slots.waiters...)
}

// removeLocked takes w out of the queue.
func (q *slotQueue) removeLocked(w *slotWaiter) {
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			return
		}
	}
}

// awaitSlot runs a queued turn: it waits for the turn's slot, publishes
// turn.dequeued, acquires the backend and runs the turn. A cancel of the
// turn (Cancel, Close, Shutdown) while it waits takes it out of the queue
// (or gives its reserved slot to the next waiter) and ends it without
// running. The caller has added to p.wg, which runTurn or awaitSlot marks
// done.
func (p *Pool) awaitSlot(s *session, w *slotWaiter, tr *turnRun, t Turn) {
	dequeued := false
	for {
		p.mu.Lock()
		ready := w.ready
		p.mu.Unlock()
		select {
		case <-ready:
		case <-tr.ctx.Done():
		case <-p.ctx.Done():
		}
		p.mu.Lock()
		if !w.granted {
			p.slots.removeLocked(w)
		}
		granted, reserved, e, err, grantedAt := w.granted, w.reserved, w.e, w.err, w.grantedAt
		closing := p.closing || p.ctx.Err() != nil
		cancelled := tr.ctx.Err() != nil || closing
		if cancelled && reserved {
			p.slots.reserved--
			p.serveQueueLocked() // the slot goes to the next waiter
		}
		p.mu.Unlock()
		switch {
		case cancelled && e != nil:
			p.release(e)
		case !cancelled && granted && err == nil && !dequeued:
			dequeued = true
			p.publish(s, backends.Event{Time: grantedAt, Type: EventTurnDequeued, Agent: t.Agent, Turn: t.ID,
				Data: backends.MustJSON(map[string]any{"turn": t.ID, "position": w.position, "waited_ms": grantedAt.Sub(w.queuedAt).Milliseconds()})})
		}
		switch {
		case cancelled && closing:
			p.abandonTurn(s, tr, t, backends.StopCancelled, "the pool shut down while the turn waited for a backend slot", fmt.Errorf("pool: %w", ErrClosed))
		case cancelled:
			p.abandonTurn(s, tr, t, backends.StopCancelled, "cancelled while waiting for a backend slot", nil)
		case err != nil:
			p.abandonTurn(s, tr, t, backends.StopError, "no agent after waiting for a backend slot", err)
		case reserved:
			// A reserved slot: take it. agent.starting follows turn.dequeued.
			p.mu.Lock()
			p.slots.reserved--
			p.slots.granting = true
			e, err = p.acquireLocked(s, t.Agent)
			p.slots.granting = false
			if errors.Is(err, ErrAtCapacity) || errors.Is(err, ErrBusy) {
				p.requeueLocked(w)
				p.serveQueueLocked()
				p.mu.Unlock()
				continue
			}
			p.mu.Unlock()
			if err != nil {
				p.abandonTurn(s, tr, t, backends.StopError, "no agent after waiting for a backend slot", err)
				break
			}
			p.runTurn(s, e, tr, t) // marks p.wg done
			return
		case e != nil:
			p.runTurn(s, e, tr, t) // marks p.wg done
			return
		default:
			// Not reached: ready is closed only with a reservation, a
			// backend or an error.
			p.abandonTurn(s, tr, t, backends.StopError, "served without a backend slot", errors.New("pool: internal error"))
		}
		p.wg.Done()
		return
	}
}

// abandonTurn ends a turn that never ran (its backend could not be
// acquired, or it was cancelled while queued): the turn row is closed, and
// turn.ended (with reason, and cause as its error) is published as the
// session becomes free, so every turn.started has its turn.ended.
func (p *Pool) abandonTurn(s *session, tr *turnRun, t Turn, stop backends.StopReason, reason string, cause error) {
	t.StopReason = string(stop)
	if cause != nil {
		t.Error = fmt.Sprintf("%s: %v", reason, cause)
		p.turnErrors.Add(1)
	}
	t.CheckpointAfter = t.CheckpointBefore // nothing ran
	end := p.cfg.Now()
	t.EndedAt = &end
	data := map[string]any{"turn": t.ID, "agent": t.Agent, "stop_reason": t.StopReason, "checkpoint": t.CheckpointAfter,
		"duration_ms": end.Sub(t.StartedAt).Milliseconds(), "reason": reason}
	if t.Error != "" {
		data["error"] = t.Error
	}
	tr.mu.Lock()
	tr.result = t
	tr.mu.Unlock()
	p.endTurn(s, t, data, nil)
	tr.cancel()
	close(tr.done)
}

// queueStatsLocked fills the queue's counters into st.
func (p *Pool) queueStatsLocked(st *Stats) {
	st.Queued = len(p.slots.waiters)
	st.QueuedTotal = p.slots.queuedTotal
	st.QueueMaxWait = p.slots.maxWait
}
