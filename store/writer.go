package store

import (
	"errors"
	"sync"
	"time"
)

// progress follows the queued items the writer has settled (written,
// rejected or abandoned), by their positions in the queue, so that Flush
// can wait for a position: settled is the position up to which every item
// has settled. The writer settles items out of queue order (sessions in
// turn, a light session's items before another's megabytes, see
// queue.takeBatch); those settled past the first one still unsettled wait
// in ahead.
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
// FlushInterval for a fuller batch, and commits what is queued, one
// transaction at a time, each taken fairly from the sessions' queues (see
// queue.takeBatch). After quit it writes what is left and returns.
func (s *Store) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-s.queue.ready:
			s.trace(stepWoke, nil)
			s.linger(timer)
		case <-s.resumed():
			// A restart of the WAL ended: write what it left queued.
		case <-s.quit:
			s.draining = true // nothing is left queued any more
			s.writeQueued()
			return
		}
		s.writeQueued()
		s.wrote = s.now()
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

// writeQueued commits what is queued, one transaction at a time, until
// nothing is left to take: each transaction is taken from the sessions'
// queues fairly (see queue.takeBatch), so that a light session's write
// that comes while megabytes of others' are queued waits for the
// transaction being written, not for the others' megabytes. While the
// checkpointer restarts the WAL (see checkpointer.quietRestart), only the
// light sessions' items are taken: the heavy ones stay queued (their
// producers wait for room) until it is over, and the WAL grows little
// meanwhile. Each item's position settles when its transaction commits:
// Flush and the reads that wait for a position never pass an item still
// to be written, while the callers waiting for one write (StartTurn, a
// turn's end) and the readers of a light session's events are answered
// as soon as their own transaction commits.
func (s *Store) writeQueued() {
	for {
		quiet := s.ckpt != nil && s.ckpt.quiet.Load() && !s.draining
		s.batch = s.queue.takeBatch(s.batch, s.cfg.BatchSize, s.cfg.BatchBytes, quiet)
		if len(s.batch) == 0 {
			break
		}
		s.trace(stepTook, s.batch)
		s.writeBatch(s.batch)
		clear(s.batch) // the events written are not the writer's to keep
	}
	if cap(s.batch) > 4*s.cfg.BatchSize {
		s.batch = nil // do not keep the memory of a burst
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
