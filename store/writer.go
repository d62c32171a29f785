package store

import (
	"errors"
	"sync"
	"time"
)

// progress counts the queued items the writer has settled (written,
// rejected or abandoned), in queue order, so that Flush can wait for a
// position in the queue.
type progress struct {
	mu      sync.Mutex
	settled int64
	changed chan struct{} // closed and replaced on every settle
}

func (p *progress) settle(n int) {
	p.mu.Lock()
	p.settled += int64(n)
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// reached reports whether the items up to position target have settled
// and, if not, a channel closed at the next settle.
func (p *progress) reached(target int64) (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settled >= target, p.changed
}

// done returns the position of the last item settled.
func (p *progress) done() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settled
}

// run is the writer goroutine: it waits for events, lingers up to
// FlushInterval for a fuller batch, and commits what it took in batches of
// BatchSize. After quit it writes what is left and returns.
func (s *Store) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var buf []item
	for {
		select {
		case <-s.queue.ready:
			s.trace(stepWoke, nil)
			s.linger(timer)
		case <-s.quit:
			for {
				if buf = s.queue.take(buf); len(buf) == 0 {
					return
				}
				s.writeTaken(buf)
			}
		}
		buf = s.queue.take(buf)
		s.trace(stepTook, buf)
		s.writeTaken(buf)
		s.wrote = s.now()
		clear(buf) // the events written are not the writer's to keep
		if cap(buf) > 4*s.cfg.BatchSize {
			buf = nil // do not keep the memory of a burst
		}
	}
}

// linger waits up to FlushInterval for the queue to fill a batch, unless a
// Flush is waiting, the store is closing, or the writer was idle: when its
// last take was written FlushInterval ago or more, what wakes it (a
// turn's start, the first token of a reply, a session's creation) is
// written at once. Under a steady stream the writer is never idle that
// long, and lingers; a burst after a quiet spell has its first item
// written alone, the rest gathering in the queue meanwhile.
func (s *Store) linger(timer *time.Timer) {
	drain(s.queue.full)
	drain(s.nudge)
	if s.flushes.Load() > 0 || s.queue.len() >= s.cfg.BatchSize || s.now().Sub(s.wrote) >= s.cfg.FlushInterval {
		return
	}
	timer.Reset(s.cfg.FlushInterval)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-s.queue.full:
	case <-s.nudge:
	case <-s.quit:
	}
}

func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// writeTaken commits the items the writer took, lighter sessions first
// (see lightFirst). When it reorders them, the queue positions settle
// only once all of them are written, so that Flush and the reads that
// wait for a position never pass an item that is still to be written; the
// callers waiting for one write (StartTurn, a turn's end) and the readers
// of a light session's events are answered as soon as their own batch
// commits.
func (s *Store) writeTaken(items []item) {
	ordered, cut, moved := lightFirst(items, s.reordered, s.cfg.BatchSize, s.cfg.BatchBytes)
	if !moved {
		s.writeAll(items)
	} else {
		s.holding = true
		// The light items lead in a transaction of their own, which is
		// quick: none of the heavy sessions' bytes are in it.
		s.writeAll(ordered[:cut])
		s.writeAll(ordered[cut:])
		s.holding = false
		s.prog.settle(s.held)
		s.held = 0
	}
	clear(ordered)
	s.reordered = ordered[:0]
	if cap(s.reordered) > 4*s.cfg.BatchSize {
		s.reordered = nil // do not keep the memory of a burst
	}
}

// settleProgress counts n more items settled, or holds them back while a
// reordered take is being written.
func (s *Store) settleProgress(n int) {
	if s.holding {
		s.held += n
		return
	}
	s.prog.settle(n)
}

// lightShare divides BatchBytes into the most bytes a session may have in
// a take and still count as light.
const lightShare = 16

// lightFirst returns items reordered into out (reused) so that, when they
// make more than one transaction, the items of light sessions (those with
// at most BatchBytes/lightShare bytes in the take) come before those of
// heavy ones: a bystander's turn row or few small events are not written
// after megabytes of another session's. The order within each session is
// kept, and an item whose session is not known (a write about no one
// session) keeps its place: nothing moves across it. It reports whether
// anything moved, and cut, the length of the leading run of light items;
// when nothing moved, items are to be written as they are (out may hold a
// copy of some of them all the same).
func lightFirst(items, out []item, size int, maxBytes int64) (_ []item, cut int, moved bool) {
	if batchLen(items, size, maxBytes) == len(items) {
		return out[:0], 0, false
	}
	light := maxBytes / lightShare
	out = out[:0]
	cut = -1
	for start := 0; start < len(items); {
		end := start
		for end < len(items) && items[end].session() != "" {
			end++
		}
		seg := items[start:end]
		if len(seg) > 1 {
			perSession := map[string]int64{}
			for i := range seg {
				perSession[seg[i].session()] += itemBytes(&seg[i])
			}
			isLight := func(it *item) bool { return perSession[it.session()] <= light }
			heavySeen := false
			for i := range seg {
				if isLight(&seg[i]) {
					out = append(out, seg[i])
					moved = moved || heavySeen
				} else {
					heavySeen = true
				}
			}
			if cut < 0 {
				cut = len(out)
			}
			for i := range seg {
				if !isLight(&seg[i]) {
					out = append(out, seg[i])
				}
			}
		} else {
			out = append(out, seg...)
		}
		if end < len(items) && cut < 0 {
			cut = len(out) // nothing moved before a barrier: cut after it
		}
		if end < len(items) {
			out = append(out, items[end]) // the barrier keeps its place
			end++
		}
		start = end
	}
	if cut < 0 {
		cut = len(out)
	}
	return out, cut, moved
}

// writeAll commits items in order, in transactions of at most BatchSize
// items and BatchBytes bytes (at least one item each).
func (s *Store) writeAll(items []item) {
	for len(items) > 0 {
		n := batchLen(items, s.cfg.BatchSize, s.cfg.BatchBytes)
		s.writeBatch(items[:n])
		items = items[n:]
	}
}

// batchLen is how many of items, from the first, make one transaction: at
// most size of them, and no more bytes than maxBytes unless the first alone.
func batchLen(items []item, size int, maxBytes int64) int {
	n := min(len(items), size)
	var b int64
	for i := range n {
		if b += itemBytes(&items[i]); b > maxBytes && i > 0 {
			return i
		}
	}
	return n
}

// writeBatch commits batch, retrying with exponential backoff until it
// succeeds or the store gives up at Close. Items the database refuses for
// themselves (a duplicate seq, an unknown session) are rejected one by one
// and the rest of the batch is written. Once the transaction has committed,
// the committed callbacks of its events run, in order, before the batch
// counts as settled: readers get an event only once it is durable, and a
// Flush that returns has seen its events delivered.
func (s *Store) writeBatch(batch []item) {
	backoff := s.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		rejected, err := s.insertItems(s.wctx, batch)
		if err == nil {
			s.failing.Store(false)
			s.full.Store(false)
			s.committed(batch, rejected)
			return
		}
		s.failing.Store(true)
		s.full.Store(isFull(err))
		if s.wctx.Err() != nil {
			n := s.dropped.Add(int64(len(batch)))
			s.log.Error("writes abandoned at close", logKeyEvents, len(batch), logKeyDropped, n, logKeyErr, err)
			for i := range batch {
				it := &batch[i]
				if it.w != nil && it.w.wait != nil {
					it.w.wait.set(waitDropped, ErrClosed)
				}
				if it.hasEvent() {
					s.lost.add(it.ev)
				}
			}
			s.queue.settled(batch)
			s.settleProgress(len(batch))
			return
		}
		// Callers waiting for a write of the batch learn why it failed (a
		// full disk makes StartTurn give up at once).
		for _, it := range batch {
			if it.w != nil && it.w.wait != nil {
				it.w.wait.set(waitPending, err)
			}
		}
		s.retries.Add(1)
		s.log.Warn("write batch failed; retrying", logKeyEvents, len(batch), logKeyAttempt, attempt,
			logKeyBackoff, backoff, logKeyErr, err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-s.wctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

// committed accounts for a committed batch, delivers its events and
// settles it.
func (s *Store) committed(batch []item, rejected []rejection) {
	s.batches.Add(1)
	refused := make(map[int]error, len(rejected))
	for _, r := range rejected {
		refused[r.index] = r.err
		if it := batch[r.index]; errors.Is(r.err, ErrFenced) {
			// Not the database's fault: this host lost the session.
			s.log.Warn("write for a session this host does not hold refused", logKeySession, it.session(), logKeyErr, r.err)
		} else if it.w != nil {
			s.log.Error("write rejected by the database", logKeyWrite, it.w.what, logKeyErr, r.err)
		} else {
			s.log.Error("event rejected by the database", logKeySession, it.ev.Session, logKeySeq, it.ev.Seq, logKeyErr, r.err)
		}
	}
	events := 0
	for i := range batch {
		it := &batch[i]
		rerr, bad := refused[i]
		if it.w != nil && it.w.wait != nil {
			if bad {
				it.w.wait.set(waitRejected, rerr)
			} else {
				it.w.wait.done(it.w.result)
			}
		}
		if bad || !it.hasEvent() || it.w != nil && it.w.wait != nil && it.w.skipped {
			continue
		}
		events++
		if it.committed != nil {
			ev := it.ev
			if s.eng.postgres {
				ev.Seq = s.allocated[i] // the seq the database gave it
			}
			it.committed(ev)
		}
	}
	s.appended.Add(int64(events))
	s.rejected.Add(int64(len(rejected)))
	s.queue.settled(batch)
	s.settleProgress(len(batch))
}
