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
	// pos is the item's position in the queue (see queue.push), at the
	// time it was pushed (UnixNano).
	pos int64
	at  int64
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
	// is not about one session; such a write is ordered with every
	// other (see queue).
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

// queue holds the writes waiting for the writer, fairly between sessions:
// each session's items wait in a queue of their own, in the order they
// were pushed, and the writer takes a batch at a time, round-robin across
// the sessions with a budget of bytes and items per round (see
// takeBatch), so that a session with 100,000 items queued waits its turn
// behind another's 10 rather than the other way round. An item about no
// one session (see item.session) is a barrier: it is written after every
// item pushed before it and before every item pushed after it (the queue
// is then a list of segments, each closed by its barrier).
//
// It is bounded by a count of items and by their bytes. The bytes (see
// itemBytes) count from push until the writer has settled the item, so
// they cover the items the writer has taken and is writing too: every
// byte the store holds for an event it has not yet written. Every item
// pushed gets a position, one more than the previous one.
//
// Room (waitRoom) is given per session: a session may hold at most
// sessionBytes unsettled, whatever the rest holds, so that one agent
// flooding the store waits for its own events to be written and not the
// others for its; and there is room while the whole is below maxBytes,
// or below hardBytes for a session whose own unsettled bytes are below
// shareBytes (a session sending a few small events is not held behind
// others that flood the queue with big ones). push, which a producer that
// waited for room may find taken by another, admits up to hardBytes.
type queue struct {
	limit     int
	batch     int
	maxBytes  int64
	hardBytes int64
	// shareBytes is what a session may hold unsettled and still find room
	// past maxBytes; sessionBytes is the most it may hold and find room.
	shareBytes   int64
	sessionBytes int64
	ready        chan struct{} // cap 1: an item was pushed
	full         chan struct{} // cap 1: the queue reached a batch

	mu     sync.Mutex
	segs   []*segment // the first is the one being written; never empty
	count  int        // items queued and not yet taken
	pushed int64      // position of the last item pushed
	closed bool
	bytes  int64         // itemBytes of the items pushed and not yet settled
	peak   int64         // the most bytes ever held
	space  chan struct{} // closed when the writer takes or settles items
	// seqs holds, per session, the seq of the newest event queued and not
	// yet settled, so that NextSeq counts it without waiting for it.
	seqs map[string]int64
	// load holds, per session, what it has unsettled in the queue and how
	// its producers waited for room.
	load map[string]*sessionLoad
	// heavySince is when the writer found heavy sessions waiting with no
	// transaction of theirs taken since (zero: none wait; see takeBatch).
	heavySince time.Time
}

// sessionLoad is what one session has in the queue, and how long its
// producers waited for room.
type sessionLoad struct {
	bytes int64 // itemBytes of its items pushed and not yet settled
	items int   // its items pushed and not yet settled
	// waiting is how many of its producers wait for room now, since when
	// the first of them has; held and holds are the time they waited and
	// the waits, since the session was first seen.
	waiting int
	since   time.Time
	held    time.Duration
	holds   int64
	last    time.Time // when a wait last ended (zero: never)
}

// segment is the part of the queue up to a barrier: its sessions' items,
// each session's in a fifo, the sessions with items in round-robin order.
type segment struct {
	fifos   map[string]*fifo
	ring    []*fifo // the sessions with items, in their round-robin order
	next    int     // the ring's next session to take from
	n       int     // items in the fifos
	barrier *item   // written after the segment's items; nil for the last segment
}

// fifo is one session's items in a segment, oldest first.
type fifo struct {
	key     string
	items   []item
	head    int
	bytes   int64 // itemBytes of items[head:]
	deficit int64 // the bytes it may still take this round (deficit round robin)
}

func (f *fifo) len() int { return len(f.items) - f.head }

// pop removes and returns the oldest item.
func (f *fifo) pop() item {
	it := f.items[f.head]
	f.items[f.head] = item{}
	f.head++
	f.bytes -= itemBytes(&it)
	return it
}

// itemBytes is what an item costs the queue: its slot and its event's
// Data (a write's arguments are small).
func itemBytes(it *item) int64 { return itemOverhead + int64(cap(it.ev.Data)) }

// itemOverhead is an item's slot in the queue.
const itemOverhead = int64(unsafe.Sizeof(item{}))

// sessionShare divides maxBytes into the most a session may hold
// unsettled and still find room.
const sessionShare = 4

func newQueue(limit, batch int, maxBytes int64) *queue {
	return &queue{
		limit:        limit,
		batch:        batch,
		maxBytes:     maxBytes,
		hardBytes:    2 * maxBytes,
		shareBytes:   maxBytes / 16,
		sessionBytes: maxBytes / sessionShare,
		ready:        make(chan struct{}, 1),
		full:         make(chan struct{}, 1),
		space:        make(chan struct{}),
		segs:         []*segment{{}},
		seqs:         map[string]int64{},
		load:         map[string]*sessionLoad{},
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
		if wait < 0 || q.count < q.limit && (cap(it.ev.Data) == 0 || q.bytes < q.hardBytes) {
			q.pushed++
			it.pos = q.pushed
			b := itemBytes(&it)
			q.bytes += b
			if k := it.session(); k != "" {
				l := q.load[k]
				if l == nil {
					l = &sessionLoad{}
					q.load[k] = l
				}
				l.bytes += b
				l.items++
			}
			q.peak = max(q.peak, q.bytes)
			if it.hasEvent() && it.ev.Seq > q.seqs[it.ev.Session] {
				q.seqs[it.ev.Session] = it.ev.Seq
			}
			q.appendLocked(it, b)
			pos, n := q.pushed, q.count
			q.mu.Unlock()
			poke(q.ready)
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

// appendLocked puts it, of b bytes, in its place: its session's fifo in
// the last segment, or, for an item about no one session, as the last
// segment's barrier.
func (q *queue) appendLocked(it item, b int64) {
	q.count++
	last := q.segs[len(q.segs)-1]
	if last.barrier != nil {
		last = &segment{}
		q.segs = append(q.segs, last)
	}
	k := it.session()
	if k == "" {
		last.barrier = &it
		return
	}
	f := last.fifos[k]
	if f == nil {
		if last.fifos == nil {
			last.fifos = map[string]*fifo{}
		}
		f = &fifo{key: k}
		last.fifos[k] = f
	}
	if f.len() == 0 {
		last.ring = append(last.ring, f)
	}
	if f.head > 0 && f.head >= len(f.items)/2 {
		// Reuse the taken half rather than grow: a session that never
		// empties its fifo keeps its memory to what it has queued.
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
	it.at = time.Now().UnixNano()
	f.items = append(f.items, it)
	f.bytes += b
	last.n++
}

// room reports whether a producer of session ("" for none) finds room.
func (q *queue) roomLocked(session string) bool {
	if q.count >= q.limit {
		return false
	}
	if session == "" {
		return q.bytes < q.maxBytes
	}
	var own int64
	if l := q.load[session]; l != nil {
		own = l.bytes
	}
	if own >= q.sessionBytes && own > 0 {
		return false
	}
	return q.bytes < q.maxBytes || own < q.shareBytes && q.bytes < q.hardBytes
}

// waitRoom returns once the queue has room for an item of session ("" for
// none, see roomLocked), and how long it waited for it (0 when there was
// room at once). It returns errQueueClosed after close, or the context's
// error.
func (q *queue) waitRoom(ctx context.Context, session string) (time.Duration, error) {
	var start time.Time
	var l *sessionLoad
	defer func() {
		if start.IsZero() || l == nil {
			return
		}
		q.mu.Lock()
		now := time.Now()
		l.waiting--
		l.held += now.Sub(start)
		l.last = now
		q.mu.Unlock()
	}()
	for {
		q.mu.Lock()
		room := q.roomLocked(session)
		closed, space := q.closed, q.space
		if !room && !closed && start.IsZero() {
			start = time.Now()
			if session != "" {
				if l = q.load[session]; l == nil {
					l = &sessionLoad{}
					q.load[session] = l
				}
				if l.waiting == 0 {
					l.since = start
				}
				l.waiting++
				l.holds++
			}
		}
		q.mu.Unlock()
		switch {
		case closed:
			return waitedSince(start), errQueueClosed
		case room:
			return waitedSince(start), nil
		}
		select {
		case <-space:
		case <-ctx.Done():
			return waitedSince(start), context.Cause(ctx)
		}
	}
}

// waitedSince is the time since start, 0 for a zero start.
func waitedSince(start time.Time) time.Duration {
	if start.IsZero() {
		return 0
	}
	return time.Since(start)
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
			if l := q.load[k]; l != nil {
				l.bytes -= b
				l.items--
				if l.items <= 0 && l.waiting == 0 && l.holds == 0 {
					delete(q.load, k) // nothing to tell of it
				}
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

// lightShare divides a transaction's bytes and items into the most a
// session may have queued and still count as light, and into the budget
// a session gets per round of the writer's round-robin.
const lightShare = 16

// lightStreak is the longest light sessions' transactions go alone, one
// after another, while heavy sessions wait (see takeBatch).
const lightStreak = 200 * time.Millisecond

// takeBatch takes from the queue, into out (emptied), the items of the
// writer's next transaction, at most size of them and maxBytes of their
// bytes (unless one item alone), from the first segment:
//
//   - first the light sessions' items, every one of them (a session is
//     light while it has at most maxBytes/lightShare bytes and
//     size/lightShare items queued): when another session is heavy, they
//     are the transaction on their own, which is quick, so that a
//     bystander's turn row waits for at most one transaction of a flood,
//     never for the flood; but once heavy sessions have had no
//     transaction for lightStreak (light sessions writing without pause
//     would starve them), the light items go with a round-robin share of
//     theirs;
//   - else round-robin across the sessions, each taking up to
//     maxBytes/lightShare bytes and size/lightShare items per round
//     (deficit round robin: bytes a session could not take this round are
//     its to take next round, so a session of big items gets its share
//     too), until the transaction is full;
//   - a segment's barrier once its segment is empty, alone.
//
// With lightOnly (the checkpointer restarts the WAL), it takes only the
// light sessions' items, leaving the heavy ones queued, unless a barrier
// is queued (which nothing may wait behind). Each session's items are
// taken in their order. An empty result means there is nothing to take.
func (q *queue) takeBatch(out []item, size int, maxBytes int64, lightOnly bool) []item {
	out = out[:0]
	q.mu.Lock()
	defer q.mu.Unlock()
	seg := q.segs[0]
	if seg.n == 0 {
		if seg.barrier == nil {
			return out
		}
		out = append(out, *seg.barrier)
		q.count--
		q.segs[0] = nil
		q.segs = q.segs[1:]
		if len(q.segs) == 0 {
			q.segs = append(q.segs, &segment{})
		}
		q.tookLocked()
		return out
	}
	lightOnly = lightOnly && len(q.segs) == 1 && seg.barrier == nil
	lightBytes, lightItems := max(maxBytes/lightShare, 1), max(size/lightShare, 1)
	isLight := func(f *fifo) bool { return f.bytes <= lightBytes && f.len() <= lightItems }
	var ob int64
	heavy := false
	for i := 0; i < len(seg.ring); {
		f := seg.ring[i]
		if !isLight(f) || len(out)+f.len() > size {
			heavy = true
			i++
			continue
		}
		for f.len() > 0 {
			it := f.pop()
			ob += itemBytes(&it)
			out = append(out, it)
		}
		seg.removeLocked(i)
	}
	seg.n -= len(out)
	q.count -= len(out)
	// Light sessions writing without pause do not starve a heavy one:
	// once heavy sessions have waited lightStreak for a transaction of
	// theirs, the light items go with a round-robin share of theirs.
	now := time.Now()
	switch {
	case !heavy:
		q.heavySince = time.Time{}
	case q.heavySince.IsZero():
		q.heavySince = now
	}
	starved := heavy && now.Sub(q.heavySince) > lightStreak
	if len(out) > 0 && heavy && !starved || lightOnly || seg.n == 0 {
		if len(out) > 0 {
			q.tookLocked()
		}
		return out
	}
	q.heavySince = time.Time{} // served now
	// Deficit round robin across the heavy sessions.
	taken := len(out)
	full := false
	for !full && seg.n > 0 {
		if seg.next >= len(seg.ring) {
			seg.next = 0
		}
		f := seg.ring[seg.next]
		f.deficit += lightBytes
		took := 0
		for ; took < lightItems && f.len() > 0; took++ {
			b := itemBytes(&f.items[f.head])
			if b > f.deficit && len(out) > 0 {
				break // its turn comes back with more budget
			}
			if len(out) > 0 && (len(out) >= size || ob+b > maxBytes) {
				full = true
				break
			}
			it := f.pop()
			f.deficit -= b
			ob += b
			out = append(out, it)
			seg.n--
		}
		switch {
		case f.len() == 0:
			f.deficit = 0
			seg.removeLocked(seg.next)
		case !full || took > 0:
			seg.next++ // the next transaction starts with the next session
		}
	}
	q.count -= len(out) - taken
	q.tookLocked()
	return out
}

// removeLocked takes the session at ring index i, which has no items left,
// out of the segment.
func (s *segment) removeLocked(i int) {
	f := s.ring[i]
	s.ring = append(s.ring[:i], s.ring[i+1:]...)
	if i < s.next {
		s.next--
	}
	delete(s.fifos, f.key)
}

// tookLocked wakes the producers waiting for room: the writer took items.
func (q *queue) tookLocked() {
	if !q.closed {
		close(q.space)
		q.space = make(chan struct{})
	}
}

// position returns the position of the last item pushed.
func (q *queue) position() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pushed
}

// len returns the number of queued items not yet taken.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count
}

// SessionQueue is what one session has in the store's write queue, and how
// long its producers (the session's agent, through the pool) waited for
// room there.
type SessionQueue struct {
	Session string `json:"session"`
	// Events and Bytes are its items queued or being written (events and
	// the writes ordered with them) and their bytes.
	Events int   `json:"events"`
	Bytes  int64 `json:"bytes"`
	// Oldest is how long its oldest item not yet taken by the writer has
	// waited for it.
	Oldest time.Duration `json:"oldest_ns"`
	// Waiting says that its producer waits for room now (the session is
	// being slowed); Held is the time its producers waited for room in
	// all, Holds how many times they did.
	Waiting bool          `json:"waiting"`
	Held    time.Duration `json:"held_ns"`
	Holds   int64         `json:"holds"`
}

// forgetLoadAfter is how long a session that has nothing queued and does
// not wait keeps its wait counters in SessionQueues.
const forgetLoadAfter = time.Hour

// sessionQueues returns what each session with something queued, or that
// waited for room in the last forgetLoadAfter, has, by session.
func (q *queue) sessionQueues() []SessionQueue {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	oldest := map[string]int64{}
	for _, seg := range q.segs {
		for _, f := range seg.ring {
			at := f.items[f.head].at
			if t, ok := oldest[f.key]; !ok || at < t {
				oldest[f.key] = at
			}
		}
	}
	out := make([]SessionQueue, 0, len(q.load))
	for k, l := range q.load {
		if l.items <= 0 && l.waiting == 0 && now.Sub(l.last) > forgetLoadAfter {
			delete(q.load, k)
			continue
		}
		sq := SessionQueue{Session: k, Events: max(l.items, 0), Bytes: max(l.bytes, 0),
			Waiting: l.waiting > 0, Held: l.held, Holds: l.holds}
		if l.waiting > 0 {
			sq.Held += now.Sub(l.since)
		}
		if t, ok := oldest[k]; ok {
			sq.Oldest = now.Sub(time.Unix(0, t))
		}
		out = append(out, sq)
	}
	return out
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
