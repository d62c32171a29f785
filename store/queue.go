package store

import (
	"context"
	"errors"
	"sync"
	"time"
	"unsafe"

	"github.com/agentpool/agentpool/backends"
)

var (
	errQueueClosed = errors.New("store closed")
	errQueueFull   = errors.New("write queue full")
)

// item is one queued write: an event, or (when w is set) another statement
// that must be ordered with the events, such as a turn's row. An item with
// both w and an event (ev.Session set) writes them in one transaction, the
// event only if w is not rejected. committed, when set, is called with the
// event once its transaction has committed.
type item struct {
	ev        backends.Event
	w         *write
	committed func(backends.Event)
	// pos is the item's position in the queue (see queue.push).
	pos int64
}

// hasEvent reports whether the item inserts an event.
func (it *item) hasEvent() bool { return it.w == nil || it.ev.Session != "" }

// session returns the session the item writes for, or "" when it is not
// known (a write that is not about one session).
func (it *item) session() string {
	if it.ev.Session != "" || it.w == nil {
		return it.ev.Session
	}
	return it.w.session
}

// write is a queued statement other than an event insert.
type write struct {
	what string // for logs: "start turn 12"
	// session is the session whose rows the statement changes, "" when it
	// is not about one session; the writer keeps such a write in place
	// while it lets light sessions' items ahead of heavy ones (see
	// lightFirst).
	session string
	query   string
	args    []any
	// group, when set, is the write's statements instead of query: all
	// of them, in order, or none (see execGroup).
	group []stmt
	// affect: the statement must change a row; when it changes none, the
	// write is counted as rejected and logged with orphan.
	affect bool
	orphan string
	// wait, when set, is how the caller waiting for this write (StartTurn)
	// follows it: the writer reports each attempt there, and skips the
	// write once the caller has abandoned it.
	wait *waited
	// skipped is set by the writer for an abandoned waited write.
	skipped bool
	// returning says that query returns one integer (INSERT ... RETURNING),
	// which the writer keeps in result during an attempt and gives the
	// waiting caller once the attempt has committed. It needs wait.
	returning bool
	result    int64
}

// stmt is a statement of a write's group and its arguments.
type stmt struct {
	query string
	args  []any
}

// queue holds the writes waiting for the writer. It is bounded by a count
// of items and by their bytes, and its memory follows its use: the writer
// takes the whole slice at once and hands back its previous one for reuse.
// Every item pushed gets a position, one more than the previous one; the
// writer settles items in that order.
//
// The bytes (see itemBytes) count from push until the writer has settled
// the item, so they cover the items the writer has taken and is writing
// too: every byte the store holds for an event it has not yet written.
// There is room while they are below maxBytes (so an event bigger than
// the budget alone still goes through); push, which a producer that waited
// for room may find taken by another, admits up to hardBytes.
//
// The room between maxBytes and hardBytes is kept for light sessions: a
// session whose own unsettled bytes are below shareBytes finds room until
// hardBytes, so a session sending a few small events is not held behind
// others that flood the queue with big ones (those wait at maxBytes), and
// memory stays bounded by hardBytes all the same.
type queue struct {
	limit     int
	batch     int
	maxBytes  int64
	hardBytes int64
	// shareBytes is what a session may hold unsettled and still find room
	// past maxBytes.
	shareBytes int64
	ready      chan struct{} // cap 1: the queue became non-empty
	full       chan struct{} // cap 1: the queue reached a batch

	mu     sync.Mutex
	items  []item
	pushed int64 // position of the last item pushed
	closed bool
	bytes  int64         // itemBytes of the items pushed and not yet settled
	peak   int64         // the most bytes ever held
	space  chan struct{} // closed when the writer takes the items
	// seqs holds, per session, the seq of the newest event queued and not
	// yet settled, so that NextSeq counts it without waiting for it.
	seqs map[string]int64
	// sbytes holds, per session, the itemBytes of its items pushed and not
	// yet settled (items without a session are not counted).
	sbytes map[string]int64
}

// itemBytes is what an item costs the queue: its slot and its event's
// Data (a write's arguments are small).
func itemBytes(it *item) int64 { return itemOverhead + int64(cap(it.ev.Data)) }

// itemOverhead is an item's slot in the queue.
const itemOverhead = int64(unsafe.Sizeof(item{}))

func newQueue(limit, batch int, maxBytes int64) *queue {
	return &queue{
		limit:      limit,
		batch:      batch,
		maxBytes:   maxBytes,
		hardBytes:  2 * maxBytes,
		shareBytes: maxBytes / 16,
		ready:      make(chan struct{}, 1),
		full:       make(chan struct{}, 1),
		space:      make(chan struct{}),
		seqs:       map[string]int64{},
		sbytes:     map[string]int64{},
	}
}

// push appends it, waiting at most wait for room when the queue is full,
// and returns its position; a negative wait appends it past the limit
// without waiting. It returns errQueueFull when no room came and
// errQueueClosed after close.
func (q *queue) push(it item, wait time.Duration) (int64, error) {
	var timer *time.Timer
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return 0, errQueueClosed
		}
		// A write without an event's Data (a turn's row) costs only its
		// slot and is let in by count alone; a negative wait goes past
		// the limits (see AppendPast).
		if wait < 0 || len(q.items) < q.limit && (cap(it.ev.Data) == 0 || q.bytes < q.hardBytes) {
			q.pushed++
			it.pos = q.pushed
			q.items = append(q.items, it)
			b := itemBytes(&it)
			q.bytes += b
			if k := it.session(); k != "" {
				q.sbytes[k] += b
			}
			q.peak = max(q.peak, q.bytes)
			if it.hasEvent() && it.ev.Seq > q.seqs[it.ev.Session] {
				q.seqs[it.ev.Session] = it.ev.Seq
			}
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

// waitRoom returns once the queue has room for an item of session ("" for
// none): below maxBytes, or below hardBytes while the session's own
// unsettled bytes are below shareBytes. It returns errQueueClosed after
// close, or the context's error.
func (q *queue) waitRoom(ctx context.Context, session string) error {
	for {
		q.mu.Lock()
		room := len(q.items) < q.limit && (q.bytes < q.maxBytes ||
			session != "" && q.bytes < q.hardBytes && q.sbytes[session] < q.shareBytes)
		closed, space := q.closed, q.space
		q.mu.Unlock()
		switch {
		case closed:
			return errQueueClosed
		case room:
			return nil
		}
		select {
		case <-space:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// settled forgets the queued seqs of the events of batch, which the writer
// has settled, and frees their bytes, waking those waiting for room.
func (q *queue) settled(batch []item) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range batch {
		it := &batch[i]
		b := itemBytes(it)
		q.bytes -= b
		if k := it.session(); k != "" {
			if q.sbytes[k] -= b; q.sbytes[k] <= 0 {
				delete(q.sbytes, k)
			}
		}
		if it.hasEvent() && q.seqs[it.ev.Session] == it.ev.Seq {
			delete(q.seqs, it.ev.Session)
		}
	}
	if len(batch) > 0 && !q.closed {
		close(q.space)
		q.space = make(chan struct{})
	}
}

// held returns the bytes of the items pushed and not yet settled, and the
// most they have ever been.
func (q *queue) held() (now, peak int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes, q.peak
}

// queuedSeq returns the seq of the newest event of session that is queued
// and not yet settled, or 0.
func (q *queue) queuedSeq(session string) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.seqs[session]
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
