package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"
)

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

// execGroup runs a write's group of statements in a savepoint of tx: a
// statement refused for itself undoes the ones before it and returns its
// error, and the transaction goes on without the write. When the undo
// itself fails, the error returned is not a refusal, so the transaction
// is not committed.
func execGroup(ctx context.Context, tx txStmts, group []stmt) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT write_group"); err != nil {
		return err
	}
	for _, st := range group {
		if _, err := tx.ExecContext(ctx, st.query, st.args...); err != nil {
			if _, uerr := tx.ExecContext(ctx, "ROLLBACK TO write_group"); uerr != nil {
				return fmt.Errorf("undo a refused write (%v): %w", err, uerr)
			}
			if _, uerr := tx.ExecContext(ctx, "RELEASE write_group"); uerr != nil {
				return fmt.Errorf("undo a refused write (%v): %w", err, uerr)
			}
			return err
		}
	}
	_, err := tx.ExecContext(ctx, "RELEASE write_group")
	return err
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
	if rejected, done, err := s.settleUnknownCommit(ctx, batch); err != nil || done {
		return rejected, err
	}
	a := &pgAttempt{
		claimed: make([]bool, len(batch)),
		refused: map[int]error{},
	}
	for {
		rejected, refusedAt, err := s.insertOnce(ctx, batch, a)
		if u, ok := errors.AsType[*unknownCommit](err); ok {
			u.allocated = slices.Clone(s.allocated)
			u.batch, u.n = &batch[0], len(batch)
			s.unknownCommit = u
			if rejected, done, cerr := s.settleUnknownCommit(ctx, batch); cerr == nil && done {
				return rejected, nil
			}
			return nil, err // retried: its next attempt asks again first
		}
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
	// fenced holds, with leasing, the sessions of the batch this store
	// does not hold at the database's epoch, with the error their items
	// are refused with (see lockSeqs).
	fenced map[string]error
	// pending holds the events to insert in one statement; oneByOne
	// inserts each in its own instead, to find the one a failed
	// statement refused.
	pending  pendingEvents
	oneByOne bool
	// pipe, unless oneByOne, holds the statements to send together (see
	// pgPipe).
	pipe *pgPipe
}

// piped returns the attempt's pipe, nil when its statements run one by
// one (SQLite, or oneByOne).
func (pg *pgAttempt) piped() *pgPipe {
	if pg == nil || pg.oneByOne {
		return nil
	}
	return pg.pipe
}

// insertOnce makes one attempt at writing batch in one transaction. On
// SQLite (pg nil) a statement refused for its own item is noted and the
// transaction goes on. On PostgreSQL the attempt ends there: insertOnce
// rolls back and returns the index of the item, its error in pg.lastErr;
// items pg.refused are skipped, and event seqs are allocated from the
// sessions' counter rows (see lockSeqs), into s.allocated. There the
// transaction is a pgTx: its statements after the counters' lock go to
// the server together with the COMMIT (see pgPipe), unless the attempt
// inserts its events one by one.
func (s *Store) insertOnce(ctx context.Context, batch []item, pg *pgAttempt) (_ []rejection, refusedAt int, err error) {
	refusedAt = -1
	s.trace(stepBegin, batch)
	if s.ckpt != nil {
		defer s.ckpt.writing()()
	}
	var tx txStmts
	var stx *sqlx.Tx // SQLite's
	if pg != nil {
		ptx, perr := newPGTx(ctx, s.db)
		if perr != nil {
			return nil, -1, perr
		}
		defer ptx.end() // a rollback unless it committed
		pg.pipe = &ptx.pipe
		tx = ptx
	} else {
		if stx, err = s.db.BeginTxx(ctx, nil); err != nil {
			return nil, -1, err
		}
		defer func() {
			if err != nil || refusedAt >= 0 {
				stx.Rollback()
			}
		}()
		tx = cachedTx{Tx: stx, c: &s.stmts}
	}
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
		if err := s.lockSeqs(ctx, pg.pipe.tx, batch, pg); err != nil {
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
			if ferr, ok := pg.fenced[it.session()]; ok {
				// Refused without a statement: the transaction goes on.
				rejected = append(rejected, rejection{index: i, err: ferr})
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
			if pipe := pg.piped(); pipe != nil && w.group == nil {
				// Sent with the COMMIT, or before it when its answer is
				// checked (see pgPipe.send).
				pipe.queueWrite(i, w)
			} else {
				if pipe != nil {
					// A group's savepoint runs statement by statement.
					if err := pg.sendPipe(ctx, false); err != nil {
						return pipeFailed(err)
					}
				}
				var res sql.Result
				if w.group != nil {
					err = execGroup(ctx, tx, w.group)
				} else {
					ws := prepared[w.query]
					if ws == nil {
						if ws, err = tx.PrepareContext(ctx, w.query); err != nil {
							return nil, -1, err
						}
						prepared[w.query] = ws
					}
					res, err = execWrite(ctx, ws, w)
				}
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
	if pg == nil {
		s.trace(stepCommit, batch)
		if err := stx.Commit(); err != nil {
			return nil, -1, err
		}
		s.trace(stepCommitted, batch)
		return rejected, -1, nil
	}
	if err := s.finishPostgres(ctx, tx, pg); err != nil {
		return pipeFailed(err)
	}
	s.trace(stepCommit, batch)
	ptx := pg.pipe.tx
	if pg.piped() != nil {
		err = pg.sendPipe(ctx, true)
	} else {
		ptx.commitSent = true
		if _, err = tx.ExecContext(ctx, "COMMIT"); err == nil {
			ptx.ended = true
		}
	}
	if err != nil {
		_, refused := errors.AsType[*refusedWrite](err)
		if ptx.commitSent && ptx.xid != 0 && !refused && !errors.Is(err, errOneByOne) {
			// The server refused nothing: it may have committed.
			return nil, -1, &unknownCommit{xid: ptx.xid, pid: ptx.pid, rejected: rejected, err: err}
		}
		return pipeFailed(err)
	}
	s.trace(stepCommitted, batch)
	return rejected, -1, nil
}
