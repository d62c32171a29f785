package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/mattn/go-sqlite3"
)

// progress counts events accepted by Append and events settled (written,
// rejected or dropped), so that Flush can wait for a point in the stream.
type progress struct {
	mu      sync.Mutex
	enq     int64
	settled int64
	changed chan struct{} // closed and replaced on every settle
}

func (p *progress) add() {
	p.mu.Lock()
	p.enq++
	p.mu.Unlock()
}

func (p *progress) settle(n int) {
	p.mu.Lock()
	p.settled += int64(n)
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// target returns the number of events accepted so far.
func (p *progress) target() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.enq
}

// reached reports whether target events have settled and, if not, a channel
// closed at the next settle.
func (p *progress) reached(target int64) (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settled >= target, p.changed
}

// pending returns the events accepted and not yet settled.
func (p *progress) pending() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.enq - p.settled
}

// run is the writer goroutine: it waits for events, lingers up to
// FlushInterval for a fuller batch, and commits what it took in batches of
// BatchSize. After quit it writes what is left and returns.
func (s *Store) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var buf []backends.Event
	for {
		select {
		case <-s.queue.ready:
			s.linger(timer)
		case <-s.quit:
			for {
				if buf = s.queue.take(buf); len(buf) == 0 {
					return
				}
				s.writeAll(buf)
			}
		}
		buf = s.queue.take(buf)
		s.writeAll(buf)
		if cap(buf) > 4*s.cfg.BatchSize {
			buf = nil // do not keep the memory of a burst
		}
	}
}

// linger waits up to FlushInterval for the queue to fill a batch, unless a
// Flush is waiting or the store is closing.
func (s *Store) linger(timer *time.Timer) {
	drain(s.queue.full)
	drain(s.nudge)
	if s.flushes.Load() > 0 || s.queue.len() >= s.cfg.BatchSize {
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

// writeAll commits events in order, BatchSize per transaction.
func (s *Store) writeAll(events []backends.Event) {
	for len(events) > 0 {
		n := min(len(events), s.cfg.BatchSize)
		s.writeBatch(events[:n])
		events = events[n:]
	}
}

// writeBatch commits batch, retrying with exponential backoff until it
// succeeds or the store gives up at Close. Events the database refuses for
// themselves (a duplicate seq, an unknown session) are rejected one by one
// and the rest of the batch is written.
func (s *Store) writeBatch(batch []backends.Event) {
	backoff := s.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		rejected, err := s.insertEvents(s.wctx, batch)
		if err == nil {
			s.batches.Add(1)
			s.appended.Add(int64(len(batch) - len(rejected)))
			s.rejected.Add(int64(len(rejected)))
			for _, r := range rejected {
				ev := batch[r.index]
				s.log.Error("event rejected by the database", logKeySession, ev.Session, logKeySeq, ev.Seq, logKeyErr, r.err)
			}
			s.prog.settle(len(batch))
			return
		}
		if s.wctx.Err() != nil {
			n := s.dropped.Add(int64(len(batch)))
			s.log.Error("events abandoned at close", logKeyEvents, len(batch), logKeyDropped, n, logKeyErr, err)
			s.prog.settle(len(batch))
			return
		}
		s.retries.Add(1)
		s.log.Warn("event batch failed; retrying", logKeyEvents, len(batch), logKeyAttempt, attempt,
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

// rejection is an event of a batch that the database refused.
type rejection struct {
	index int
	err   error
}

const insertEventSQL = `INSERT INTO events (session_id, seq, turn_id, agent, type, data, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?)`

// insertEvents writes batch in one transaction. A statement failing for its
// own event (see refusesEvent) is only that statement's failure in SQLite,
// so it is noted and the transaction goes on; any other failure rolls the
// whole batch back and is returned.
func (s *Store) insertEvents(ctx context.Context, batch []backends.Event) (_ []rejection, err error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, insertEventSQL)
	if err != nil {
		return nil, err
	}
	defer stmt.Close()
	var rejected []rejection
	now := toUnix(s.now())
	for i, ev := range batch {
		at := now
		if !ev.Time.IsZero() {
			at = toUnix(ev.Time)
		}
		_, err := stmt.ExecContext(ctx, ev.Session, ev.Seq, nullID(ev.Turn), ev.Agent, string(ev.Type),
			nullText(ev.Data), at)
		if err != nil {
			if refusesEvent(err) {
				rejected = append(rejected, rejection{index: i, err: err})
				continue
			}
			return nil, err
		}
	}
	return rejected, tx.Commit()
}

// refusesEvent reports whether err is about the event itself, so that
// retrying cannot help: a constraint (duplicate key, unknown session, bad
// seq), a value too big or of the wrong type.
func refusesEvent(err error) bool {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code {
	case sqlite3.ErrConstraint, sqlite3.ErrTooBig, sqlite3.ErrMismatch, sqlite3.ErrRange:
		return true
	}
	return false
}
