package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
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
		clear(buf) // the events written are not the writer's to keep
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
		if it := batch[r.index]; it.w != nil {
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

// execWrite runs w's statement; a RETURNING one keeps its value in
// w.result and has no sql.Result (it cannot be combined with affect). A
// RETURNING statement that returns no row (PostgreSQL's turn row of a
// session without a row) refuses its write with errNoSession.
func execWrite(ctx context.Context, st *sql.Stmt, w *write) (sql.Result, error) {
	if w.returning {
		err := st.QueryRowContext(ctx, w.args...).Scan(&w.result)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("%s: %w", w.what, errNoSession)
		}
		return nil, err
	}
	return st.ExecContext(ctx, w.args...)
}

// rejection is an item of a batch that the database refused.
type rejection struct {
	index int
	err   error
}

const insertEventSQL = `INSERT INTO events (session_id, seq, turn, agent, type, data, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?)`

// errNoRow rejects a write that had to change a row and changed none.
var errNoRow = errors.New("no such row")

// insertItems writes batch in one transaction. A statement failing for its
// own item (see refusesEvent) is only that statement's failure in SQLite,
// so it is noted and the transaction goes on; any other failure rolls the
// whole batch back and is returned. PostgreSQL aborts the transaction at
// a failed statement: the batch is then written again without the item
// refused (see insertItemsPostgres).
func (s *Store) insertItems(ctx context.Context, batch []item) ([]rejection, error) {
	if s.eng.postgres {
		return s.insertItemsPostgres(ctx, batch)
	}
	rejected, _, err := s.insertOnce(ctx, batch, nil)
	return rejected, err
}

// insertItemsPostgres is insertItems on PostgreSQL: each attempt that a
// statement refused for its own item is rolled back and made again
// without the items refused so far, so that the rest of the batch commits
// as it does on SQLite. A waited write is claimed once, on the first
// attempt that reaches it.
func (s *Store) insertItemsPostgres(ctx context.Context, batch []item) ([]rejection, error) {
	a := &pgAttempt{
		claimed: make([]bool, len(batch)),
		refused: map[int]error{},
	}
	for {
		rejected, refusedAt, err := s.insertOnce(ctx, batch, a)
		if errors.Is(err, errOneByOne) {
			// An event of the statement that inserts many was refused:
			// insert them one by one to tell which.
			a.oneByOne = true
			continue
		}
		if err != nil {
			return nil, err
		}
		if refusedAt < 0 {
			return rejected, nil
		}
		a.refused[refusedAt] = a.lastErr
	}
}

// pgAttempt is what the attempts of one insertItemsPostgres share.
type pgAttempt struct {
	claimed []bool        // the waited writes claimed (see waited.claim)
	refused map[int]error // the items refused, left out of later attempts
	lastErr error         // why the last attempt's item was refused
	// seqs holds, per session, the last seq handed out as the current
	// attempt goes; committed the session's counter row moves to it.
	seqs  map[string]int64
	moved map[string]bool
	// pending holds the events to insert in one statement; oneByOne
	// inserts each in its own instead, to find the one a failed
	// statement refused.
	pending  pendingEvents
	oneByOne bool
}

// insertOnce makes one attempt at writing batch in one transaction. On
// SQLite (pg nil) a statement refused for its own item is noted and the
// transaction goes on. On PostgreSQL the attempt ends there: insertOnce
// rolls back and returns the index of the item, its error in pg.lastErr;
// items pg.refused are skipped, and event seqs are allocated from the
// sessions' counter rows (see lockSeqs), into s.allocated.
func (s *Store) insertOnce(ctx context.Context, batch []item, pg *pgAttempt) (_ []rejection, refusedAt int, err error) {
	refusedAt = -1
	s.trace(stepBegin, batch)
	if s.ckpt != nil {
		defer s.ckpt.writing()()
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return nil, -1, err
	}
	defer func() {
		if err != nil || refusedAt >= 0 {
			tx.Rollback()
		}
	}()
	var stmt *sql.Stmt
	// Each turn row's statement is prepared once per batch, not once per
	// row: a batch holds the rows of several turns.
	prepared := map[string]*sql.Stmt{}
	defer func() {
		for _, st := range prepared {
			st.Close()
		}
	}()
	var rejected []rejection
	if pg != nil {
		pg.pending.reset()
		if err := s.lockSeqs(ctx, tx, batch, pg); err != nil {
			return nil, -1, err
		}
		for i, rerr := range pg.refused {
			rejected = append(rejected, rejection{index: i, err: rerr})
		}
		s.allocated = slices.Grow(s.allocated[:0], len(batch))[:len(batch)]
	}
	// refuse notes that item i was refused for itself; on PostgreSQL it
	// ends the attempt.
	refuse := func(i int, rerr error) bool {
		if pg != nil {
			pg.lastErr, refusedAt = rerr, i
			return true
		}
		rejected = append(rejected, rejection{index: i, err: rerr})
		return false
	}
	now := toUnix(s.now())
	for i := range batch {
		it := &batch[i]
		if pg != nil {
			if _, ok := pg.refused[i]; ok {
				continue
			}
		}
		if w := it.w; w != nil {
			if w.wait != nil {
				// An abandoned write is skipped; a claimed one is reported
				// to its caller when the attempt ends.
				if pg == nil || !pg.claimed[i] {
					w.skipped = !w.wait.claim()
					if pg != nil {
						pg.claimed[i] = true
					}
				}
				if w.skipped {
					continue
				}
			}
			if err := s.flushPending(ctx, tx, pg); err != nil {
				return nil, -1, err
			}
			ws := prepared[w.query]
			if ws == nil {
				if ws, err = tx.PrepareContext(ctx, w.query); err != nil {
					return nil, -1, err
				}
				prepared[w.query] = ws
			}
			res, err := execWrite(ctx, ws, w)
			if err == nil && w.affect {
				if n, aerr := res.RowsAffected(); aerr == nil && n == 0 {
					rejected = append(rejected, rejection{index: i, err: fmt.Errorf("%w: %s", errNoRow, w.orphan)})
					continue
				}
			}
			if errors.Is(err, errNoSession) {
				// Refused without a failed statement: the transaction goes on.
				rejected = append(rejected, rejection{index: i, err: err})
				continue
			}
			if err != nil {
				if refusesEvent(err) {
					if refuse(i, err) {
						return nil, refusedAt, nil
					}
					continue
				}
				return nil, -1, err
			}
			if !it.hasEvent() {
				continue
			}
		}
		ev := it.ev
		at := now
		if !ev.Time.IsZero() {
			at = toUnix(ev.Time)
		}
		seq := ev.Seq
		if pg != nil {
			last, ok := pg.seqs[ev.Session]
			if !ok {
				rejected = append(rejected, rejection{index: i, err: fmt.Errorf("event of session %q: %w", ev.Session, errNoSession)})
				continue
			}
			// The caller's seq when it is ahead (a single writer's own,
			// past the seqs of events it dropped), else the next one.
			seq = max(last+1, ev.Seq)
			if !pg.oneByOne {
				// Inserted with the others in one statement (see
				// flushPending) before the next write and the commit.
				pg.pending.add(ev, seq, at)
				pg.seqs[ev.Session] = seq
				pg.moved[ev.Session] = true
				s.allocated[i] = seq
				continue
			}
		}
		if stmt == nil {
			if stmt, err = tx.PrepareContext(ctx, insertEventSQL); err != nil {
				return nil, -1, err
			}
			defer stmt.Close()
		}
		_, err := stmt.ExecContext(ctx, ev.Session, seq, nullID(ev.Turn), ev.Agent, string(ev.Type),
			nullText(ev.Data), at)
		if err != nil {
			if refusesEvent(err) {
				if refuse(i, err) {
					return nil, refusedAt, nil
				}
				continue
			}
			return nil, -1, err
		}
		if pg != nil {
			pg.seqs[ev.Session] = seq
			pg.moved[ev.Session] = true
			s.allocated[i] = seq
		}
	}
	if pg != nil {
		if err := s.flushPending(ctx, tx, pg); err != nil {
			return nil, -1, err
		}
		if err := s.storeSeqs(ctx, tx, pg); err != nil {
			return nil, -1, err
		}
	}
	s.trace(stepCommit, batch)
	if err := tx.Commit(); err != nil {
		return nil, -1, err
	}
	s.trace(stepCommitted, batch)
	return rejected, -1, nil
}
