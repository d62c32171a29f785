package store

import (
	"errors"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
)

var (
	errQueueClosed = errors.New("store closed")
	errQueueFull   = errors.New("event queue full")
)

// queue holds the events waiting for the writer. It is bounded, and its
// memory follows its use: the writer takes the whole slice at once and hands
// back its previous one for reuse.
type queue struct {
	limit int
	batch int
	ready chan struct{} // cap 1: the queue became non-empty
	full  chan struct{} // cap 1: the queue reached a batch

	mu     sync.Mutex
	items  []backends.Event
	closed bool
	space  chan struct{} // closed when the writer takes the items
}

func newQueue(limit, batch int) *queue {
	return &queue{
		limit: limit,
		batch: batch,
		ready: make(chan struct{}, 1),
		full:  make(chan struct{}, 1),
		space: make(chan struct{}),
	}
}

// push appends ev, waiting at most wait for room when the queue is full. It
// returns errQueueFull when no room came and errQueueClosed after close.
func (q *queue) push(ev backends.Event, wait time.Duration) error {
	var timer *time.Timer
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return errQueueClosed
		}
		if len(q.items) < q.limit {
			q.items = append(q.items, ev)
			n := len(q.items)
			q.mu.Unlock()
			if n == 1 {
				poke(q.ready)
			}
			if n == q.batch {
				poke(q.full)
			}
			return nil
		}
		space := q.space
		q.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-space:
		case <-timer.C:
			return errQueueFull
		}
	}
}

// take returns every queued event, in order, and keeps spare (emptied) as
// the new queue.
func (q *queue) take(spare []backends.Event) []backends.Event {
	clear(spare)
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.items
	q.items = spare[:0]
	if len(out) > 0 && !q.closed {
		close(q.space)
		q.space = make(chan struct{})
	}
	return out
}

// len returns the number of queued events.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// close refuses further pushes and wakes those waiting for room.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.space)
	}
}

// poke leaves a token in a one-slot channel without blocking.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
