package store

import (
	"errors"
	"sync"
	"time"
)

// progress follows the queued items the writer has settled (written,
// rejected or abandoned), by their positions in the queue, so that Flush
// can wait for a position: settled is the position up to which every item
// has settled. The writer settles items out of queue order (a light
// session's items before another's megabytes, see lightFirst); those
// settled past the first one still unsettled wait in ahead.
type progress struct {
	mu      sync.Mutex
	settled int64
	ahead   map[int64]struct{}
	changed chan struct{} // closed and replaced on every settle
}

// settle counts the items of batch settled.
func (p *progress) settle(batch []item) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range batch {
		pos := batch[i].pos
		if pos != p.settled+1 {
			if p.ahead == nil {
				p.ahead = map[int64]struct{}{}
			}
			p.ahead[pos] = struct{}{}
			continue
		}
		p.settled++
		for {
			if _, ok := p.ahead[p.settled+1]; !ok {
				break
			}
			delete(p.ahead, p.settled+1)
			p.settled++
		}
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// reached reports whether the items up to position target have settled
// and, if not, a channel closed at the next settle.
func (p *progress) reached(target int64) (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settled >= target, p.changed
}

// done returns the position up to which every item has settled.
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
		case <-s.resumed():
			// A restart of the WAL ended: write what it left queued.
		case <-s.quit:
			s.draining = true // nothing is left queued any more
			for {
				if buf = s.queue.take(buf); len(buf) == 0 && len(s.deferred) == 0 {
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

// writeTaken commits the items the writer took, one transaction at a
// time, lighter sessions first (see lightFirst): after each transaction
// the items queued meanwhile join those still to write, so that a light
// session's write that comes while megabytes of others' are being written
// waits for one transaction of them, not for all. Each item's position
// settles when its transaction commits: Flush and the reads that wait for
// a position never pass an item still to be written, while the callers
// waiting for one write (StartTurn, a turn's end) and the readers of a
// light session's events are answered as soon as their own transaction
// commits.
func (s *Store) writeTaken(items []item) {
	pending := s.deferHeavy(items)
	var own []item // pending, once reordered or joined by later items
	for len(pending) > 0 {
		n := batchLen(pending, s.cfg.BatchSize, s.cfg.BatchBytes)
		ordered, cut, moved := lightFirst(pending, s.reordered, s.cfg.BatchSize, s.cfg.BatchBytes)
		if moved {
			// The light items lead in a transaction of their own, which
			// is quick: none of the heavy sessions' bytes are in it.
			own = append(own[:0], ordered...)
			pending, n = own, batchLen(own, s.cfg.BatchSize, s.cfg.BatchBytes)
			if cut > 0 {
				n = min(n, cut)
			}
		}
		clear(ordered)
		s.reordered = ordered[:0]
		s.writeBatch(pending[:n])
		pending = pending[n:]
		if len(pending) == 0 {
			break
		}
		if more := s.queue.take(nil); len(more) > 0 {
			more = s.deferHeavy(more)
			joined := make([]item, 0, len(pending)+len(more))
			own = append(append(joined, pending...), more...)
			pending = own
		}
	}
	if cap(s.reordered) > 4*s.cfg.BatchSize {
		s.reordered = nil // do not keep the memory of a burst
	}
}

// resumed is the channel that tells the writer a restart of the WAL
// ended (nil, never ready, without a checkpointer).
func (s *Store) resumed() <-chan struct{} {
	if s.ckpt == nil {
		return nil
	}
	return s.ckpt.resume
}

// deferHeavy returns the items of a take to write now. While the
// checkpointer restarts the WAL (see checkpointer.quietRestart), the items
// of heavy sessions (more than BatchBytes/lightShare bytes in the take) and
// of sessions with items already left are left in s.deferred, in order, to
// be written first once it is over: the light sessions' items go on being
// written, and the WAL grows little meanwhile. Left items stay in the
// queue's bytes, so that their producers wait for room, and their
// positions settle once they are written. An item about no one session
// (which nothing may pass) ends the wait for this take.
func (s *Store) deferHeavy(items []item) []item {
	quiet := s.ckpt != nil && s.ckpt.quiet.Load() && !s.draining
	if quiet {
		for i := range items {
			if items[i].session() == "" {
				quiet = false
				break
			}
		}
	}
	if !quiet {
		if len(s.deferred) == 0 {
			return items
		}
		out := append(s.deferred, items...) // the left items are older
		s.deferred = nil
		clear(s.deferredFrom)
		return out
	}
	perSession := map[string]int64{}
	for i := range items {
		perSession[items[i].session()] += itemBytes(&items[i])
	}
	light := s.cfg.BatchBytes / lightShare
	now := items[:0] // in place: an item moves only towards the start
	for _, it := range items {
		k := it.session()
		if perSession[k] > light || s.deferredFrom[k] {
			if s.deferredFrom == nil {
				s.deferredFrom = map[string]bool{}
			}
			s.deferredFrom[k] = true
			s.deferred = append(s.deferred, it)
			continue
		}
		now = append(now, it)
	}
	clear(items[len(now):])
	return now
}

// lightShare divides BatchBytes into the most bytes a session may have in
// a take and still count as light.
const lightShare = 16

// lightFirst returns items reordered into out (reused) so that the items
// of light sessions (those with at most BatchBytes/lightShare bytes in the
// take) come before those of heavy ones, in a transaction of their own: a
// bystander's turn row or few small events are not written after, nor
// with, megabytes of another session's. The order within each session is
// kept, and an item whose session is not known (a write about no one
// session) keeps its place: nothing moves across it. It reports whether
// the take is to be written in two parts, light and heavy (some session
// is heavy and another light), and cut, the length of the leading run of
// light items; when not, items are to be written as they are (out may
// hold a copy of some of them all the same).
func lightFirst(items, out []item, size int, maxBytes int64) (_ []item, cut int, moved bool) {
	light := maxBytes / lightShare
	var total int64
	for i := range items {
		total += itemBytes(&items[i])
	}
	if total <= light {
		return out[:0], 0, false // no session in it can be heavy
	}
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
			lightSeen, heavySeen := false, false
			for i := range seg {
				if isLight(&seg[i]) {
					out = append(out, seg[i])
					lightSeen = true
				} else {
					heavySeen = true
				}
			}
			moved = moved || lightSeen && heavySeen
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
			s.prog.settle(batch)
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
	s.prog.settle(batch)
}
