package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"
	"github.com/mattn/go-sqlite3"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/store/postgres"
)

// engine is what differs between the databases the store runs on: how an
// error is classified, the migrations, and the few statements whose
// dialects differ. The store's methods are written once against it.
type engine struct {
	// postgres is set for PostgreSQL, unset for SQLite.
	postgres bool
	// migrations holds migrations/NNNN_name.sql for this engine.
	migrations fs.FS
}

var (
	sqliteEngine   = engine{migrations: migrationFS}
	postgresEngine = engine{postgres: true, migrations: postgresMigrations}
)

// name is the engine's name in logs and errors.
func (e engine) name() string {
	if e.postgres {
		return "postgres"
	}
	return "sqlite"
}

// noLimit is the LIMIT argument that means "all rows".
func (e engine) noLimit() any {
	if e.postgres {
		return nil // LIMIT NULL
	}
	return -1
}

// pgCode returns the SQLSTATE in err, or "".
func pgCode(err error) string { return postgres.Code(err) }

// isFull reports whether err says the disk holding the database is full:
// SQLITE_FULL, PostgreSQL's disk_full, or ENOSPC.
func isFull(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrFull {
		return true
	}
	if pgCode(err) == postgres.DiskFull {
		return true
	}
	return errors.Is(err, syscall.ENOSPC)
}

// refusesEvent reports whether err is about the event or write itself, so
// that retrying cannot help: a constraint (duplicate key, unknown session,
// bad seq), a value too big or of the wrong type.
func refusesEvent(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrConstraint, sqlite3.ErrTooBig, sqlite3.ErrMismatch, sqlite3.ErrRange:
			return true
		}
		return false
	}
	if code := pgCode(err); len(code) == 5 {
		switch code[:2] {
		case postgres.ClassIntegrity, postgres.ClassData:
			return true
		}
	}
	return false
}

// constraintKind classifies a constraint violation for mapWriteErr.
type constraintKind int

const (
	constraintOther constraintKind = iota
	constraintUnique
	constraintForeignKey
)

// constraintOf says which kind of constraint err violates, on either engine.
func constraintOf(err error) constraintKind {
	switch sqliteCode(err) {
	case sqlite3.ErrConstraintPrimaryKey, sqlite3.ErrConstraintUnique:
		return constraintUnique
	case sqlite3.ErrConstraintForeignKey:
		return constraintForeignKey
	}
	switch pgCode(err) {
	case postgres.UniqueViolation:
		return constraintUnique
	case postgres.ForeignKeyViolation:
		return constraintForeignKey
	}
	return constraintOther
}

// sqliteCode returns the extended SQLite error code in err, or 0.
func sqliteCode(err error) sqlite3.ErrNoExtended {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.ExtendedCode
	}
	return 0
}

// errNoSession is the error of an event whose session row does not exist
// when its transaction allocates its seq (PostgreSQL); mapWriteErr and the
// logs treat it as the foreign-key violation SQLite reports.
var errNoSession = errors.New("no such session")

// lossReportedSQL says whether a session already has the error event that
// reports a loss (session, type, from_seq, count).
func (e engine) lossReportedSQL() string {
	if e.postgres {
		return `SELECT EXISTS (SELECT 1 FROM events WHERE session_id = ? AND type = ?
			AND (data::jsonb #>> '{lost,from_seq}')::bigint = ? AND (data::jsonb #>> '{lost,count}')::bigint = ?)`
	}
	return `SELECT EXISTS (SELECT 1 FROM events WHERE session_id = ? AND type = ?
			AND json_extract(data, '$.lost.from_seq') = ? AND json_extract(data, '$.lost.count') = ?)`
}

// lastSeqSQL reads the last seq handed out in a session.
func (e engine) lastSeqSQL() string {
	if e.postgres {
		return `SELECT last_seq FROM sessions WHERE id = ?`
	}
	return `SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?`
}

// nextSeqTx allocates the next seq of session in tx for one event stored
// outside the writer (the report of a loss), after floor: on PostgreSQL
// from the session's counter row, which it moves and keeps locked until
// tx ends; on SQLite, where the store is the only writer, from the
// session's largest seq.
func (e engine) nextSeqTx(ctx context.Context, tx *sqlx.Tx, session string, floor int64) (int64, error) {
	var next int64
	if e.postgres {
		err := tx.GetContext(ctx, &next, `UPDATE sessions SET last_seq = GREATEST(last_seq, ?) + 1 WHERE id = ? RETURNING last_seq`,
			floor, session)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("session %q: %w", session, errNoSession)
		}
		return next, err
	}
	var last int64
	if err := tx.GetContext(ctx, &last, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?`, session); err != nil {
		return 0, err
	}
	return max(last, floor) + 1, nil
}

// lockSeqs reads and locks, in tx, the seq counter rows of the sessions
// whose events batch holds (but pg.refused), in the order of their ids, so
// that two stores writing the same sessions take the locks in the same
// order. A session without a row (deleted, or never created) is left out
// of pg.seqs; its events are refused. With leasing it locks the rows of
// every session the batch writes for, events or other writes, and reads
// their leases in the same statement: the items of a session this store
// does not hold at the database's epoch are fenced (pg.fenced), and the
// lock keeps the lease from moving until the batch commits.
func (s *Store) lockSeqs(ctx context.Context, tx *pgTx, batch []item, pg *pgAttempt) error {
	ids := make([]string, 0, 4)
	seen := make(map[string]bool, 4)
	for i := range batch {
		if _, ok := pg.refused[i]; ok || !batch[i].hasEvent() && !s.leasing {
			continue
		}
		id := batch[i].session()
		if id == "" && !batch[i].hasEvent() {
			continue // a write about no one session
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	pg.seqs = make(map[string]int64, len(ids))
	pg.moved = make(map[string]bool, len(ids))
	pg.fenced = nil
	if len(ids) == 0 {
		return nil
	}
	q := `SELECT id, last_seq FROM sessions WHERE id = ANY(?) ORDER BY id FOR NO KEY UPDATE`
	var held map[string]int64
	if s.leasing {
		q = `SELECT id, last_seq, lease_owner, lease_epoch FROM sessions WHERE id = ANY(?) ORDER BY id FOR NO KEY UPDATE`
		held = s.leases.epochsOf(ids)
	}
	err := tx.query(ctx, q, []any{ids}, func(rows pgx.Rows) error {
		var id, owner string
		var last, epoch int64
		dest := []any{&id, &last}
		if s.leasing {
			dest = append(dest, &owner, &epoch)
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		pg.seqs[id] = last
		if s.leasing && (owner != s.cfg.HostID || epoch != held[id] || held[id] == 0) {
			if pg.fenced == nil {
				pg.fenced = map[string]error{}
			}
			pg.fenced[id] = s.fencedError(id, owner, epoch, held[id])
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("lock seq counters: %w", err)
	}
	return nil
}

// storeSeqsSQL moves the counter rows of the sessions given (ids, last
// seqs) to their last seq.
const storeSeqsSQL = `UPDATE sessions SET last_seq = v.last
	FROM unnest(?::text[], ?::bigint[]) AS v(id, last) WHERE sessions.id = v.id`

// finishPostgres ends a PostgreSQL attempt's statements: it inserts the
// pending events and moves the counter rows of the sessions that got
// events to the last seq handed out, in one statement (one round trip
// fewer per transaction, on the writer's path). An event the insert
// refuses makes it fail with errOneByOne, as flushPending does.
func (s *Store) finishPostgres(ctx context.Context, tx txStmts, pg *pgAttempt) error {
	if len(pg.moved) == 0 {
		return s.flushPending(ctx, tx, pg)
	}
	ids := make([]string, 0, len(pg.moved))
	lasts := make([]int64, 0, len(pg.moved))
	for id := range pg.moved {
		ids = append(ids, id)
		lasts = append(lasts, pg.seqs[id])
	}
	p := &pg.pending
	if pipe := pg.piped(); pipe != nil {
		if len(p.seqs) == 0 {
			pipe.queueEvents(storeSeqsSQL, ids, lasts)
		} else {
			pipe.queueEvents(`WITH inserted AS (`+insertManySQL+`) `+storeSeqsSQL,
				p.sessions, p.seqs, p.turns, p.agents, p.types, p.data, p.at, ids, lasts)
		}
		// Not reset: the arrays are sent as they are with the COMMIT; the
		// next attempt resets them.
		return nil
	}
	if len(p.seqs) == 0 {
		if _, err := tx.ExecContext(ctx, storeSeqsSQL, ids, lasts); err != nil {
			return fmt.Errorf("store seq counters: %w", err)
		}
		return nil
	}
	defer p.reset()
	_, err := tx.ExecContext(ctx, `WITH inserted AS (`+insertManySQL+`) `+storeSeqsSQL,
		p.sessions, p.seqs, p.turns, p.agents, p.types, p.data, p.at, ids, lasts)
	if err != nil && refusesEvent(err) {
		return fmt.Errorf("%w: %w", errOneByOne, err)
	}
	if err != nil {
		return fmt.Errorf("store events and seq counters: %w", err)
	}
	return nil
}

// pendingEvents are events to insert in one statement, column by column.
type pendingEvents struct {
	sessions []string
	seqs     []int64
	turns    []*int64
	agents   []string
	types    []string
	data     []*string
	at       []int64
}

func (p *pendingEvents) add(ev backends.Event, seq, at int64) {
	p.sessions = append(p.sessions, ev.Session)
	p.seqs = append(p.seqs, seq)
	p.turns = append(p.turns, nullID(ev.Turn))
	p.agents = append(p.agents, ev.Agent)
	p.types = append(p.types, string(ev.Type))
	p.data = append(p.data, nullText(ev.Data))
	p.at = append(p.at, at)
}

func (p *pendingEvents) reset() {
	p.sessions, p.seqs, p.turns, p.agents = p.sessions[:0], p.seqs[:0], p.turns[:0], p.agents[:0]
	clear(p.data)
	p.types, p.data, p.at = p.types[:0], p.data[:0], p.at[:0]
}

// errOneByOne says that the statement inserting pending events refused
// one of them: the attempt is made again inserting them one by one.
var errOneByOne = errors.New("an event of a multi-row insert was refused")

// insertManySQL inserts events given as one array per column: one round
// trip for a batch's events, where PostgreSQL would take one per row.
const insertManySQL = `INSERT INTO events (session_id, seq, turn, agent, type, data, created_at)
	SELECT * FROM unnest(?::text[], ?::bigint[], ?::bigint[], ?::text[], ?::text[], ?::text[], ?::bigint[])`

// flushPending inserts the pending events of a PostgreSQL attempt (pg nil:
// SQLite, nothing to do).
func (s *Store) flushPending(ctx context.Context, tx txStmts, pg *pgAttempt) error {
	if pg == nil || len(pg.pending.seqs) == 0 {
		return nil
	}
	p := &pg.pending
	defer p.reset()
	if pipe := pg.piped(); pipe != nil {
		// Queued: the pending arrays are reused once reset.
		pipe.queueEvents(insertManySQL, slices.Clone(p.sessions), slices.Clone(p.seqs), slices.Clone(p.turns),
			slices.Clone(p.agents), slices.Clone(p.types), slices.Clone(p.data), slices.Clone(p.at))
		return nil
	}
	_, err := tx.ExecContext(ctx, insertManySQL, p.sessions, p.seqs, p.turns, p.agents, p.types, p.data, p.at)
	if err != nil && refusesEvent(err) {
		return fmt.Errorf("%w: %w", errOneByOne, err)
	}
	return err
}
