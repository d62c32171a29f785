package store

import (
	"errors"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
)

var (
	errQueueClosed = errors.New("store closed")
	errQueueFull   = errors.New("write queue full")
)

// item is one queued write: an event, or (when w is set) another statement
// that must be ordered with the events, such as a turn's row.
type item struct {
	ev backends.Event
	w  *write
}

// write is a queued statement other than an event insert.
type write struct {
	what  string // for logs: "start turn 12"
	query string
	args  []any
	// affect: the statement must change a row; when it changes none, the
	// write is counted as rejected and logged with orphan.
	affect bool
	orphan string
}

// queue holds the writes waiting for the writer. It is bounded, and its
// memory follows its use: the writer takes the whole slice at once and hands
// back its previous one for reuse. Every item pushed gets a position, one
// more than the previous one; the writer settles items in that order.
type queue struct {
	limit int
	batch int
	ready chan struct{} // cap 1: the queue became non-empty
	full  chan struct{} // cap 1: the queue reached a batch

	mu     sync.Mutex
	items  []item
	pushed int64 // position of the last item pushed
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

// push appends it, waiting at most wait for room when the queue is full,
// and returns its position. It returns errQueueFull when no room came and
// errQueueClosed after close.
func (q *queue) push(it item, wait time.Duration) (int64, error) {
	var timer *time.Timer
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return 0, errQueueClosed
		}
		if len(q.items) < q.limit {
			q.items = append(q.items, it)
			q.pushed++
			pos, n := q.pushed, len(q.items)
			q.mu.Unlock()
			if n == 1 {
				poke(q.ready)
			}
			if n == q.batch {
				poke(q.full)
			}
			return pos, nil
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
			return 0, errQueueFull
		}
	}
}

// take returns every queued item, in order, and keeps spare (emptied) as
// the new queue.
func (q *queue) take(spare []item) []item {
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

// position returns the position of the last item pushed.
func (q *queue) position() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pushed
}

// len returns the number of queued items.
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
