package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"

	"github.com/agentpool/agentpool/store/postgres"
)

// txStmts is what the writer's transaction runs statements with: a
// *sqlx.Tx on SQLite, a *pgTx on PostgreSQL.
type txStmts interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// pgTx is a transaction of the writer on PostgreSQL, on a connection of
// its own. Its BEGIN is sent with its first statements and its COMMIT
// with its last ones (see pgPipe): a transaction of the writer is two
// round trips to the server, where database/sql's would be four (BEGIN,
// the counters' lock, the inserts, COMMIT). On a loaded machine each
// round trip is a wait for the CPU, in the daemon and in the server, and
// the writer commits one transaction at a time: its round trips are what
// an event waits for before its readers get it.
type pgTx struct {
	conn  *sqlx.Conn
	begun bool // BEGIN was sent
	ended bool // COMMIT or ROLLBACK was answered
	// xid is the transaction's id (txid_current, read with its BEGIN),
	// and commitSent says its COMMIT went out: when no answer comes
	// back, the server may have committed it, and txid_status tells.
	xid        int64
	commitSent bool
	pid        uint32 // the server process of the connection
	pipe       pgPipe
}

// newPGTx returns a transaction on a connection taken from db; its
// first statement begins it.
func newPGTx(ctx context.Context, db *sqlx.DB) (*pgTx, error) {
	conn, err := db.Connx(ctx)
	if err != nil {
		return nil, err
	}
	t := &pgTx{conn: conn}
	t.pipe.tx = t
	return t, nil
}

// begin sends BEGIN unless it was sent.
func (t *pgTx) begin(ctx context.Context) error {
	if t.begun {
		return nil
	}
	if _, err := t.conn.ExecContext(ctx, "BEGIN"); err != nil {
		return err
	}
	t.begun = true
	return t.conn.QueryRowContext(ctx, txidSQL).Scan(&t.xid, &t.pid)
}

// txidSQL reads the transaction's id and its server process, sent with
// its BEGIN.
const txidSQL = `SELECT txid_current(), pg_backend_pid()`

// ExecContext runs query in the transaction.
func (t *pgTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.conn.ExecContext(ctx, query, args...)
}

// QueryContext runs query in the transaction.
func (t *pgTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.conn.QueryContext(ctx, query, args...)
}

// PrepareContext prepares query on the transaction's connection.
func (t *pgTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.conn.PrepareContext(ctx, query)
}

// begunIn reads the answers to BEGIN and txidSQL, the first statements
// of br.
func (t *pgTx) begunIn(br pgx.BatchResults) error {
	if _, err := br.Exec(); err != nil {
		return err
	}
	t.begun = true
	return br.QueryRow().Scan(&t.xid, &t.pid)
}

// end rolls the transaction back unless it ended, and gives its
// connection back. A connection left in a transaction (its ROLLBACK
// failed, or took over rollbackTimeout) is closed by the pool, not
// reused.
func (t *pgTx) end() {
	if t.begun && !t.ended {
		ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
		_, _ = t.conn.ExecContext(ctx, "ROLLBACK")
		cancel()
	}
	t.conn.Close()
}

// rollbackTimeout bounds the ROLLBACK of a failed transaction of the
// writer: a connection that does not answer it is given up.
const rollbackTimeout = 5 * time.Second

// query sends query (with BEGIN if the transaction has not begun) and
// gives each row of its answer to scan. Nothing may be queued in the
// pipe.
func (t *pgTx) query(ctx context.Context, query string, args []any, scan func(pgx.Rows) error) error {
	if len(t.pipe.ops) > 0 {
		return errors.New("store: a query behind queued statements")
	}
	return t.batch(ctx, func(b *pgx.Batch) {
		b.Queue(postgres.Rebind(query), args...)
	}, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// batch sends the statements build queues on the transaction's
// connection, in one round trip, after BEGIN (and txidSQL) when the
// transaction has not begun, and gives read their answers. It returns
// read's error, else the batch's; errStopRead stops reading without one.
func (t *pgTx) batch(ctx context.Context, build func(*pgx.Batch), read func(pgx.BatchResults) error) error {
	return t.conn.Raw(func(dc any) error {
		conn, err := postgres.PgxConn(dc)
		if err != nil {
			return err
		}
		var b pgx.Batch
		begin := !t.begun
		if begin {
			b.Queue("BEGIN")
			b.Queue(txidSQL)
		}
		build(&b)
		br := conn.SendBatch(ctx, &b)
		if begin {
			err = t.begunIn(br)
		}
		if err == nil {
			err = read(br)
		}
		cerr := br.Close()
		switch {
		case errors.Is(err, errStopRead):
			return nil
		case err != nil:
			return err
		}
		return cerr
	})
}

// errStopRead is what a batch's reader returns to stop reading without
// an error of its own: an answer refused the item of its statement, which
// the reader noted, and the attempt ends there (rolled back).
var errStopRead = errors.New("stop reading the batch")

// pgPipe holds the statements of a PostgreSQL attempt that the writer
// needs no answer to before it sends the next: the events' inserts and
// the writes of the batch (turn rows), in the batch's order, then the
// counters' update and the COMMIT. They are sent together, in one round
// trip (pgx's batch: the server runs them in order, and skips the rest
// after one fails), where each would take one. A burst of 100 turn ends
// in one transaction costs one round trip, not 200.
type pgPipe struct {
	tx  *pgTx
	ops []pipeOp
}

// pipeOp is a queued statement and what it is for.
type pipeOp struct {
	query string
	args  []any
	index int    // the batch's item of a write, -1 for the others
	w     *write // the write, nil for the others
}

// queueWrite queues item index's write w.
func (p *pgPipe) queueWrite(index int, w *write) {
	p.ops = append(p.ops, pipeOp{query: w.query, args: w.args, index: index, w: w})
}

// queueEvents queues query, a statement inserting events or moving seq
// counters (their columns as arrays: the caller gives slices it no longer
// changes).
func (p *pgPipe) queueEvents(query string, args ...any) {
	p.ops = append(p.ops, pipeOp{query: query, args: args, index: -1})
}

// send sends the queued statements in one round trip, after BEGIN if the
// transaction has not begun, and before COMMIT when commit is set (in a
// round trip of its own after a write the answer of which is checked),
// and reads their answers in order; the pipe is empty afterwards. A write
// whose statement the database refused for itself (see refusesEvent), a
// write that had to change a row and changed none, and a RETURNING write
// that returned no row end the attempt: send returns the item's index,
// with its error in lastErr, and the attempt is made again without it
// (its event, if any, was queued after it, and is rolled back with it).
// An events' insert refused for one of its events returns errOneByOne.
func (p *pgPipe) send(ctx context.Context, commit bool) (refusedAt int, lastErr error, err error) {
	refusedAt = -1
	t := p.tx
	if len(p.ops) == 0 && !commit {
		return -1, nil, nil
	}
	ops := p.ops
	defer func() { p.ops = p.ops[:0] }()
	// A write that must change a row, or return one, is checked here,
	// not by the server, which would commit without it: the COMMIT then
	// waits for the answers.
	for _, op := range ops {
		if commit && op.w != nil && (op.w.affect || op.w.returning) {
			if at, lastErr, err := p.send(ctx, false); err != nil || at >= 0 {
				return at, lastErr, err
			}
			return p.send(ctx, true)
		}
	}
	err = t.batch(ctx, func(b *pgx.Batch) {
		for _, op := range ops {
			b.Queue(postgres.Rebind(op.query), op.args...)
		}
		if commit {
			b.Queue("COMMIT")
			t.commitSent = true
		}
	}, func(br pgx.BatchResults) error {
		for _, op := range ops {
			var rerr error
			switch w := op.w; {
			case w == nil:
				_, rerr = br.Exec()
				if rerr != nil && refusesEvent(rerr) {
					rerr = fmt.Errorf("%w: %w", errOneByOne, rerr)
				}
			case w.returning:
				rerr = br.QueryRow().Scan(&w.result)
				if errors.Is(rerr, pgx.ErrNoRows) || errors.Is(rerr, sql.ErrNoRows) {
					refusedAt, lastErr = op.index, fmt.Errorf("%s: %w", w.what, errNoSession)
					rerr = nil
				}
			default:
				tag, xerr := br.Exec()
				rerr = xerr
				if rerr == nil && w.affect && tag.RowsAffected() == 0 {
					refusedAt, lastErr = op.index, fmt.Errorf("%w: %s", errNoRow, w.orphan)
				}
			}
			if rerr != nil && op.w != nil && refusesEvent(rerr) {
				refusedAt, lastErr, rerr = op.index, rerr, nil
			}
			if rerr != nil {
				return rerr
			}
			if refusedAt >= 0 {
				// The attempt ends: a statement the server refused made
				// it skip the rest, the COMMIT included; a checked write
				// has its COMMIT in a round trip of its own, not sent.
				return errStopRead
			}
		}
		if !commit {
			return nil
		}
		tag, err := br.Exec()
		if err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		t.ended = true
		if tag.String() != "COMMIT" {
			return fmt.Errorf("commit: the server answered %q", tag.String())
		}
		return nil
	})
	return refusedAt, lastErr, err
}

// sendPipe sends the attempt's piped statements, if any, and the COMMIT
// when commit is set (see pgPipe.send). A write refused for itself is
// returned as a *refusedWrite, its error in pg.lastErr.
func (pg *pgAttempt) sendPipe(ctx context.Context, commit bool) error {
	pipe := pg.piped()
	if pipe == nil {
		return nil
	}
	at, rerr, err := pipe.send(ctx, commit)
	if err != nil {
		return err
	}
	if at >= 0 {
		pg.lastErr = rerr
		return &refusedWrite{index: at}
	}
	return nil
}

// refusedWrite says that the write of a batch's item was refused for
// itself, once its piped statement's answer came: the attempt ends there,
// as if the statement had run alone.
type refusedWrite struct{ index int }

func (r *refusedWrite) Error() string { return fmt.Sprintf("write of item %d refused", r.index) }

// pipeFailed returns what insertOnce returns when sending a PostgreSQL
// attempt's statements failed with err: the index of a write refused for
// itself (see refusedWrite), else err.
func pipeFailed(err error) ([]rejection, int, error) {
	if r, ok := errors.AsType[*refusedWrite](err); ok {
		return nil, r.index, nil
	}
	return nil, -1, err
}

// unknownCommit is the error of an attempt whose COMMIT went out and
// whose answer did not come back (the connection was lost): the server
// may have committed it, and written again its events would be stored
// twice, under new seqs. The writer asks the server (committedTx) before
// it writes the batch again; until the server answers, it does not.
type unknownCommit struct {
	xid       int64
	pid       uint32      // the server process that ran it
	rejected  []rejection // the attempt's, as if it committed
	allocated []int64     // the seqs it gave the batch's events
	err       error
	batch     *item // the batch's first item, and its length
	n         int
}

// of says whether batch is the one u is about.
func (u *unknownCommit) of(batch []item) bool {
	return len(batch) == u.n && len(batch) > 0 && &batch[0] == u.batch
}

func (u *unknownCommit) Error() string {
	return fmt.Sprintf("transaction %d: no answer to its COMMIT: %v", u.xid, u.err)
}

func (u *unknownCommit) Unwrap() error { return u.err }

// settleUnknownCommit settles batch's last attempt when its COMMIT went
// unanswered (s.unknownCommit): done when it committed, the batch then
// written, with the attempt's rejections; not done when it aborted, or
// when there is nothing to settle, the batch then to be written. An
// error (the server still unreachable, or the transaction still ending)
// leaves it to settle at the next attempt, before anything is written
// again.
func (s *Store) settleUnknownCommit(ctx context.Context, batch []item) (_ []rejection, done bool, _ error) {
	u := s.unknownCommit
	if u == nil {
		return nil, false, nil
	}
	if !u.of(batch) {
		s.unknownCommit = nil // a batch abandoned at close
		return nil, false, nil
	}
	done, err := s.committedTx(ctx, u)
	if err != nil || !done {
		return nil, false, err
	}
	return u.rejected, true, nil
}

// committedTx asks the server whether u's transaction committed. When it
// did, the batch is written: s.allocated is its seqs again. When it did
// not, the batch is to be written again. An error (the server still
// unreachable, or the transaction still ending) leaves u to ask again.
func (s *Store) committedTx(ctx context.Context, u *unknownCommit) (bool, error) {
	var status sql.NullString
	if err := s.db.QueryRowContext(ctx, `SELECT txid_status(?)`, u.xid).Scan(&status); err != nil {
		return false, fmt.Errorf("ask whether transaction %d committed: %w", u.xid, err)
	}
	switch status.String {
	case "committed":
		s.unknownCommit = nil
		s.allocated = u.allocated
		s.log.Warn("a transaction whose COMMIT had no answer committed", "xid", u.xid)
		return true, nil
	case "in progress":
		// Its connection is lost to the writer but not yet to the
		// server (a link that went down without a word): end it, so
		// that the next question has an answer. Only the process still
		// running this transaction: its pid, gone since, may be another
		// connection's now, another host's.
		_, _ = s.db.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE pid = ? AND backend_xid::text = (?::bigint % 4294967296)::text`, int64(u.pid), u.xid)
		return false, fmt.Errorf("transaction %d is still ending", u.xid)
	}
	// Aborted (or, NULL, too old to tell, which a moment ago cannot be).
	s.unknownCommit = nil
	return false, nil
}
