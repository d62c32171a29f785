package pool

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/agentpool/agentpool/backends"
)

// Sizes of a feed's storage.
const (
	// maxChunk is the most events one chunk of a feed's ring holds.
	maxChunk = 64
	// maxBackingBatch bounds the events one Next reads from a feed's
	// backing source, so a reader far behind catches up in steps.
	maxBackingBatch = 512
	// maxBackingBytes is about the most bytes one Next reads from a feed's
	// backing source: a reader asks for as many events as fit at the size
	// of the events it last read from there (or of those in the ring), and
	// the store's page stops once their Data reaches it (storedEvents).
	maxBackingBytes = 4 << 20
	// coldBackingBatch is the batch of a reader that has no size to go by
	// (an empty ring, no read from the backing source yet).
	coldBackingBatch = 16
	// eventOverhead is what an event costs the ring besides its Data: its
	// slot in a chunk.
	eventOverhead = int64(unsafe.Sizeof(backends.Event{}))
)

// eventBytes is what ev costs the ring that holds it: its slot and the
// array behind its Data (shared with the store's write queue and every
// reader, never copied by the feed).
func eventBytes(ev backends.Event) int64 {
	return eventOverhead + int64(cap(ev.Data))
}

// backingSource reads a stream's events with seq > after, oldest first,
// at most limit of them (limit > 0). It must hold every event published
// to the feed before the call.
type backingSource func(ctx context.Context, after int64, limit int) ([]backends.Event, error)

// Feed is one stream of events: a ring of the most recent ones, appended
// by the publisher in O(1), and any number of subscriptions that each hold
// only a cursor and read everything after it in batches. The publisher
// never waits for a reader and never visits one; readers behind the ring
// catch up from the backing source, or end with ErrSlowSubscriber when
// there is none. Its methods are safe for concurrent use.
//
// The ring is bounded by a count of events and, when the feed has a byte
// budget, by their bytes (see eventBytes): publishing drops the oldest
// events until the ring holds at most the budget, but it always keeps the
// newest event, even one bigger than the budget alone, so that live
// readers take it from memory (shared) rather than each reading its own
// copy from the backing source.
//
// The ring is a table of chunks. A chunk's slots are written once, each
// before the chunk's filled position covers it, and a chunk is replaced,
// never reused, when the ring wraps or drops the oldest of its events (by
// a copy holding only the rest): readers copy from it without a lock, and
// one that still holds a replaced chunk reads what it always held.
type Feed struct {
	backing backingSource
	// stamped feeds number their events themselves (the daemon-wide
	// stream, whose events come from many sessions); others use Event.Seq.
	stamped bool
	// dropped and catchups, when set, count readers ended for falling
	// behind and reads of the backing source.
	dropped, catchups *atomic.Int64
	ready             chan struct{} // always closed: Ready's answer when Next would not wait
	csize             int64         // slots per chunk
	budget            int64         // most bytes the ring holds (0: no bound but its count)

	table  []atomic.Pointer[chunk] // the chunk starting at s is at table[s/csize%len]
	last   atomic.Int64            // position of the newest event published (0: none)
	oldest atomic.Int64            // no older position is in memory; every one from it to last is
	bytes  atomic.Int64            // eventBytes of the events in memory; stored under mu
	closed atomic.Bool             // set by Close, after err
	// wake is what waiting readers wait on: made by the first of them,
	// closed and cleared by the next Publish or Close, so one publish
	// wakes them all once and publishes while none waits cost nothing.
	wake atomic.Pointer[waiter]

	mu   sync.Mutex // serialises Publish and Close
	cur  *chunk     // the chunk being filled; nil once dropped
	err  error      // why the feed ended; read once closed is seen
	peak int64      // the most bytes the ring ever held, for tests
}

// chunk is a run of ring slots: evs[i] is position start+i, written once.
type chunk struct {
	start  int64
	first  int64                    // the first position written (a gap may skip the ones before)
	filled atomic.Int64             // the last position written
	evs    [maxChunk]backends.Event // the first csize are used
}

// waiter is a channel closed to wake the readers waiting on it.
type waiter struct{ c chan struct{} }

// NewFeed returns a feed that keeps at least the ring most recent events
// in memory (ring >= 1), whatever their size.
// Publish gives it events whose Seq increases by one each time; the first
// may start anywhere. backing, which may be nil, serves a reader whose
// cursor is older than the ring; with nil backing such a reader ends with
// ErrSlowSubscriber.
func NewFeed(ring int, backing func(ctx context.Context, after int64, limit int) ([]backends.Event, error)) *Feed {
	return newFeed(ring, 0, backing)
}

// newFeed is NewFeed whose ring also holds at most budget bytes of events
// besides the newest (budget <= 0: no bound by bytes).
func newFeed(ring int, budget int64, backing backingSource) *Feed {
	ring = max(ring, 1)
	csize := min(ring, maxChunk)
	ready := make(chan struct{})
	close(ready)
	f := &Feed{backing: backing, ready: ready, csize: int64(csize), budget: max(budget, 0),
		table: make([]atomic.Pointer[chunk], (ring+csize-1)/csize+1)}
	f.oldest.Store(1)
	return f
}

// newSessionFeed returns the feed of a session whose newest stored event
// is last, keeping at most ring events and budget bytes of them in memory,
// counting catch-ups from the store into catchups.
func newSessionFeed(ring int, budget int64, last int64, backing backingSource, catchups *atomic.Int64) *Feed {
	f := newFeed(ring, budget, backing)
	f.last.Store(last)
	f.oldest.Store(last + 1)
	f.catchups = catchups
	return f
}

// newStampedFeed returns a feed without backing that numbers its events
// itself, keeping at most ring events and budget bytes of them in memory,
// and counting the readers it drops into dropped.
func newStampedFeed(ring int, budget int64, dropped *atomic.Int64) *Feed {
	f := newFeed(ring, budget, nil)
	f.stamped, f.dropped = true, dropped
	return f
}

// Publish appends ev and wakes the waiting readers. On a feed numbered by
// Event.Seq, an event whose Seq is not above the newest is ignored, and
// one that skips seqs restarts the ring at it (readers of the skipped
// range go to the backing source). Events published after Close are not
// delivered.
func (f *Feed) Publish(ev backends.Event) {
	if f.publish(ev) {
		f.wakeAll()
	}
}

// publish appends ev and says whether it did.
func (f *Feed) publish(ev backends.Event) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false
	}
	last := f.last.Load()
	pos := last + 1
	if !f.stamped {
		if ev.Seq <= last {
			return false
		}
		pos = ev.Seq
	}
	size := eventBytes(ev)
	switch {
	case pos != last+1: // a gap: nothing before pos is in memory
		f.dropLocked(last + 1)
		f.oldest.Store(pos)
	case f.budget > 0 && f.bytes.Load()+size > f.budget:
		f.dropLocked(f.keepFromLocked(size))
	}
	start := pos - pos%f.csize
	c := f.cur
	if c == nil || c.start != start {
		slot := &f.table[start/f.csize%int64(len(f.table))]
		if old := slot.Load(); old != nil {
			f.dropLocked(old.filled.Load() + 1) // the ring wrapped
		}
		c = &chunk{start: start, first: pos}
		slot.Store(c)
		f.cur = c
	}
	c.evs[pos-start] = ev
	c.filled.Store(pos)
	f.bytes.Add(size)
	f.peak = max(f.peak, f.bytes.Load())
	f.last.Store(pos)
	return true
}

// keepFromLocked returns the position from which the ring keeps its events
// to take one more of size bytes within its budget. It frees an eighth of
// the budget more than needed, so that events much smaller than the budget
// replace a chunk (see dropLocked) once per many publishes, not at each.
func (f *Feed) keepFromLocked(size int64) int64 {
	keep := f.budget - f.budget/8 - size // may be < 0: keep only the new event
	p, held := f.oldest.Load(), f.bytes.Load()
	for last := f.last.Load(); p <= last && held > keep; p++ {
		held -= eventBytes(f.eventLocked(p))
	}
	return p
}

// eventLocked returns the event at position p, which is in memory.
func (f *Feed) eventLocked(p int64) backends.Event {
	start := p - p%f.csize
	return f.table[start/f.csize%int64(len(f.table))].Load().evs[p-start]
}

// dropLocked drops from memory the events before position upTo (at most
// last+1): a chunk it empties leaves the table, and one it cuts is
// replaced by a copy of the events it keeps, so that the dropped events'
// Data can be freed at once, but by no reader still holding the chunk.
func (f *Feed) dropLocked(upTo int64) {
	from := f.oldest.Load()
	if upTo <= from {
		return
	}
	// oldest moves before the chunks it drops leave the table, so a reader
	// that misses one sees why.
	f.oldest.Store(upTo)
	for start := from - from%f.csize; start < upTo; start += f.csize {
		slot := &f.table[start/f.csize%int64(len(f.table))]
		c := slot.Load()
		if c == nil || c.start != start {
			continue // a gap's chunk begins later
		}
		filled := c.filled.Load()
		var freed int64
		for p := max(from, c.first); p < upTo && p <= filled; p++ {
			freed += eventBytes(c.evs[p-start])
		}
		f.bytes.Add(-freed)
		var rest *chunk // nil when nothing of c stays
		if upTo <= filled {
			rest = &chunk{start: start, first: upTo}
			copy(rest.evs[upTo-start:filled-start+1], c.evs[upTo-start:filled-start+1])
			rest.filled.Store(filled)
		}
		slot.Store(rest)
		if f.cur == c {
			f.cur = rest
		}
	}
}

// dropRing lets go of every event in the ring of a feed with a backing
// source (it does nothing without one): subscriptions behind read the
// source instead, so that one not read for a while (a stalled client of a
// closed session) holds no event in memory.
func (f *Feed) dropRing() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.backing != nil {
		f.dropLocked(f.last.Load() + 1)
	}
}

// retained returns the bytes the ring holds now and the most it ever held.
func (f *Feed) retained() (now, peak int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bytes.Load(), f.peak
}

// wakeAll wakes every reader waiting on the feed. Call it after the change
// they wait for, which they check after taking the waiter.
func (f *Feed) wakeAll() {
	if w := f.wake.Swap(nil); w != nil {
		close(w.c)
	}
}

// waiter returns the channel the next Publish or Close closes, making it
// if no reader waits yet.
func (f *Feed) waiter() <-chan struct{} {
	for {
		if w := f.wake.Load(); w != nil {
			return w.c
		}
		w := &waiter{c: make(chan struct{})}
		if f.wake.CompareAndSwap(nil, w) {
			return w.c
		}
	}
}

// Close ends the feed: each subscription gets err (ErrClosed if nil) from
// Next once it has read every event published before. Later calls do
// nothing.
func (f *Feed) Close(err error) {
	if err == nil {
		err = ErrClosed
	}
	f.mu.Lock()
	first := f.err == nil
	if first {
		f.err = err
		f.closed.Store(true)
	}
	f.mu.Unlock()
	if first {
		f.wakeAll()
	}
}

// endErr returns the feed's end error once it is closed, else nil.
func (f *Feed) endErr() error {
	if !f.closed.Load() {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Subscribe returns a subscription whose cursor is after: its first Next
// returns the events with seq > after.
func (f *Feed) Subscribe(after int64) *Subscription {
	s := &Subscription{f: f, head: f.last.Load()}
	s.cursor.Store(max(after, 0))
	return s
}

// subscribeNow returns a subscription that gets only events published
// after the call.
func (f *Feed) subscribeNow() *Subscription {
	return f.Subscribe(f.last.Load())
}

// read copies the events at positions from..to from the ring into a new
// slice. It stops early, possibly at once, at a position no longer (or
// never) in memory.
func (f *Feed) read(from, to int64) []backends.Event {
	var out []backends.Event
	for p := from; p <= to; {
		start := p - p%f.csize
		c := f.table[start/f.csize%int64(len(f.table))].Load()
		if c == nil || c.start != start || p < c.first {
			break
		}
		end := min(to, c.filled.Load())
		if end < p {
			break
		}
		if out == nil {
			out = make([]backends.Event, 0, to-from+1)
		}
		out = append(out, c.evs[p-start:end-start+1]...)
		p = end + 1
	}
	return out
}

// Subscription is a cursor on a Feed: the position of the last event it
// returned. Next and Ready are for one reader goroutine; Close and Err may
// be called from any.
type Subscription struct {
	f      *Feed
	head   int64
	cursor atomic.Int64 // stored only by the reader
	// avgBytes is the mean eventBytes of the last batch read from the
	// backing source (0: none yet); only the reader uses it.
	avgBytes int64

	mu  sync.Mutex
	err error // why it ended; nil while live
}

// Head is the seq of the newest event of the feed when the subscription
// was made (0 if there was none): a reader that wants only the events
// that existed then stops once it has read this one.
func (s *Subscription) Head() int64 { return s.head }

// end records err as the reason s ended unless it has one, counting a
// drop, and returns the reason.
func (s *Subscription) end(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		if err == ErrSlowSubscriber && s.f.dropped != nil {
			s.f.dropped.Add(1)
		}
	}
	return s.err
}

// ended returns the reason s ended, nil while it is live.
func (s *Subscription) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// state returns the error that ended s, or whether events after its
// cursor exist (in the ring or only in the backing source).
func (s *Subscription) state() (avail bool, err error) {
	if err := s.ended(); err != nil {
		return false, err
	}
	f := s.f
	closed := f.closed.Load() // before last: no publish follows a close
	cur := s.cursor.Load()
	switch {
	case cur < f.last.Load():
		if f.backing == nil && cur+1 < f.oldest.Load() {
			return false, s.end(ErrSlowSubscriber)
		}
		return true, nil
	case closed:
		return false, s.end(f.endErr())
	}
	return false, nil
}

// Next waits until events after the cursor exist and returns up to limit
// of them (all available if limit <= 0, up to about maxBackingBytes of
// data as the backing source's pages: see pageOf), oldest first, in a
// slice that is the caller's; the cursor moves to the last one. It returns ctx.Err()
// when ctx ends, ErrClosed after Close, ErrSlowSubscriber when the feed
// has no backing source and the cursor fell behind its ring, and the
// feed's end error (see Feed.Close) once every event before it was read.
// A failed read of the backing source is returned wrapped; the
// subscription stays usable.
func (s *Subscription) Next(ctx context.Context, limit int) ([]backends.Event, error) {
	f := s.f
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		avail, err := s.state()
		if err != nil {
			return nil, err
		}
		if !avail {
			if wake := s.wait(); wake != nil {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-wake:
				}
			}
			continue
		}
		cur := s.cursor.Load()
		to := f.last.Load()
		if limit > 0 {
			to = min(to, cur+int64(limit))
		}
		if out := pageOf(f.read(cur+1, to)); len(out) > 0 {
			s.cursor.Store(cur + int64(len(out)))
			return out, nil
		}
		if f.backing == nil {
			continue // the ring moved on since state looked: it ends s now
		}
		if out, err := s.catchUp(ctx, cur, limit); err != nil || len(out) > 0 {
			return out, err
		}
	}
}

// pageOf cuts evs, read from the ring, after the event that brings their
// bytes to maxBackingBytes, as the store's pages are cut: a reader far
// behind in a ring of big events gets them in steps, the same as from
// the store (at least one event each time).
func pageOf(evs []backends.Event) []backends.Event {
	var b int64
	for i, ev := range evs {
		if b += eventBytes(ev); b >= maxBackingBytes {
			return evs[:i+1]
		}
	}
	return evs
}

// catchUp reads the events after `after` from the backing source and
// moves the cursor past them. It may return nothing, with the cursor moved
// up to the ring when the source lacks the range (events it lost).
func (s *Subscription) catchUp(ctx context.Context, after int64, limit int) ([]backends.Event, error) {
	f := s.f
	if f.catchups != nil {
		f.catchups.Add(1)
	}
	n := s.backingBatch()
	if limit > 0 {
		n = min(n, limit)
	}
	evs, err := f.backing(ctx, after, n)
	if len(evs) > 0 {
		var b int64
		for _, ev := range evs {
			b += eventBytes(ev)
		}
		s.avgBytes = b / int64(len(evs))
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("catch up after seq %d: %w", after, err)
	}
	if err := s.ended(); err != nil {
		return nil, err // closed meanwhile
	}
	// Keep what follows the cursor in order, whatever the source returned,
	// and, once the feed is closed, nothing published after.
	closed := f.closed.Load()
	last := f.last.Load()
	out := evs[:0]
	for _, ev := range evs {
		if closed && ev.Seq > last {
			break
		}
		if ev.Seq > after {
			out = append(out, ev)
			after = ev.Seq
		}
	}
	if len(out) == 0 {
		// The source has nothing after the cursor: skip what it lacks.
		after = max(after, min(f.oldest.Load()-1, last))
	}
	s.cursor.Store(after)
	return out, nil
}

// backingBatch is how many events to ask the backing source for: as many
// as fit in maxBackingBytes at the mean size of the events last read from
// it, or else of those in the ring, from 1 to maxBackingBatch.
func (s *Subscription) backingBatch() int {
	avg := s.avgBytes
	if avg == 0 {
		f := s.f
		// A racy mean (bytes and count are read apart) is good enough here.
		if held, n := f.bytes.Load(), f.last.Load()-f.oldest.Load()+1; held > 0 && n > 0 {
			avg = held / n
		}
	}
	if avg <= 0 {
		return coldBackingBatch
	}
	return int(min(max(maxBackingBytes/avg, 1), maxBackingBatch))
}

// Ready returns a channel that is closed when Next would not wait: events
// after the cursor exist or the subscription has ended. Take a new one
// after each Next.
func (s *Subscription) Ready() <-chan struct{} {
	if avail, err := s.state(); avail || err != nil {
		return s.f.ready
	}
	if wake := s.wait(); wake != nil {
		return wake
	}
	return s.f.ready
}

// wait returns the channel to wait on for news, or nil if there is news
// already: it takes the waiter first and checks after, so a Publish in
// between, which wakes after its change, is never missed.
func (s *Subscription) wait() <-chan struct{} {
	wake := s.f.waiter()
	if avail, err := s.state(); avail || err != nil {
		return nil
	}
	return wake
}

// Close ends the subscription: Next returns ErrClosed, at once if it is
// waiting. It is idempotent.
func (s *Subscription) Close() {
	s.end(ErrClosed)
	// Waiting readers of other subscriptions wake too, look, and wait again.
	s.f.wakeAll()
}

// Err says why the subscription ended: ErrClosed (after Close, or the end
// of its session or of the pool), ErrSlowSubscriber; nil while it is live,
// which includes while events before the feed's end are left to read.
func (s *Subscription) Err() error {
	_, err := s.state()
	return err
}
