package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
)

// Errors of leases; callers test them with errors.Is.
var (
	// ErrFenced is returned by a write for a session this store does not
	// hold at the database's epoch: another host took it over or was
	// handed it, a later start of this host claimed it, or this store
	// never held it. The write changed nothing; the host must stop the
	// session's agents.
	ErrFenced = errors.New("session lease not held by this host")
	// ErrLeaseHeld is returned by TakeOver of a lease that has not
	// expired (or of a closed session), and by HandOver to no host or to
	// the holder itself, or without leasing.
	ErrLeaseHeld = errors.New("session lease held")
)

// Lease is the ownership of one session by one host. Epoch grows by one
// at each change of owner (and at each start of the owner, see
// ClaimOwn); every write for the session carries it.
type Lease struct {
	Session, Owner string
	Epoch          int64
	// Expires is when the lease runs out unless renewed, by the
	// database's clock.
	Expires time.Time
	// Open is false for a closed session, whose lease no longer matters;
	// Agent is the session's active agent.
	Open  bool
	Agent string
}

// dbNowSQL is the database's clock in the stored form (unix ns); leases
// are timed by it alone, so that hosts' clocks may disagree. It is
// PostgreSQL's: leasing is on only there.
const dbNowSQL = `CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000000 AS BIGINT)`

// heldLeases is the sessions a store holds, with the epoch it holds each
// at.
type heldLeases struct {
	mu     sync.Mutex
	epochs map[string]int64
}

func (h *heldLeases) get(session string) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.epochs[session]
	return e, ok
}

func (h *heldLeases) set(session string, epoch int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.epochs[session] = epoch
}

// drop forgets session if it is still held at epoch.
func (h *heldLeases) drop(session string, epoch int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.epochs[session]; ok && e == epoch {
		delete(h.epochs, session)
	}
}

func (h *heldLeases) release(session string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.epochs, session)
}

// snapshot returns the sessions held and their epochs, by session.
func (h *heldLeases) snapshot() (ids []string, epochs []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids = make([]string, 0, len(h.epochs))
	for id := range h.epochs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	epochs = make([]int64, len(ids))
	for i, id := range ids {
		epochs[i] = h.epochs[id]
	}
	return ids, epochs
}

// epochsOf returns the epochs held of ids, 0 for one not held.
func (h *heldLeases) epochsOf(ids []string) map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int64, len(ids))
	for _, id := range ids {
		out[id] = h.epochs[id]
	}
	return out
}

// Leasing reports whether the store leases sessions: on PostgreSQL with a
// HostID. Without leasing (SQLite, one host) the lease methods do nothing
// and the host owns every session.
func (s *Store) Leasing() bool { return s.leasing }

// LeaseTTL is how long a lease lasts unless renewed (Config.LeaseTTL).
func (s *Store) LeaseTTL() time.Duration { return s.cfg.LeaseTTL }

// HostID returns the host the store writes for (Config.HostID).
func (s *Store) HostID() string { return s.cfg.HostID }

// fencedError says that this store does not hold session at the epoch
// the database has: owner holds it at epoch (held is what this store
// holds, 0 for nothing).
func (s *Store) fencedError(session, owner string, epoch, held int64) error {
	who := fmt.Sprintf("host %q", owner)
	if owner == "" {
		who = "no host"
	}
	if held == 0 {
		return fmt.Errorf("session %q is leased to %s at epoch %d, not to %q: %w", session, who, epoch, s.cfg.HostID, ErrFenced)
	}
	return fmt.Errorf("session %q is leased to %s at epoch %d; host %q held epoch %d: %w",
		session, who, epoch, s.cfg.HostID, held, ErrFenced)
}

// checkHeld returns nil when this store holds session at epoch, the
// database's, as owner; else it forgets what it held and returns the
// error wrapping ErrFenced.
func (s *Store) checkHeld(session, owner string, epoch int64) error {
	held, ok := s.leases.get(session)
	if ok && owner == s.cfg.HostID && epoch == held {
		return nil
	}
	if ok {
		s.leases.drop(session, held)
	}
	return s.fencedError(session, owner, epoch, held)
}

// fence checks, in tx, that this store holds session at the database's
// epoch, and locks the session's row until tx ends, so that no take-over
// or hand-over passes the write it guards. It returns an error wrapping
// ErrFenced when it does not, ErrNotFound when the session does not
// exist. Without leasing it does nothing.
func (s *Store) fence(ctx context.Context, tx *sqlx.Tx, session string) error {
	if !s.leasing {
		return nil
	}
	var row struct {
		Owner string `db:"lease_owner"`
		Epoch int64  `db:"lease_epoch"`
	}
	err := tx.GetContext(ctx, &row, `SELECT lease_owner, lease_epoch FROM sessions WHERE id = ? FOR NO KEY UPDATE`, session)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: session %q", ErrNotFound, session)
	}
	if err != nil {
		return fmt.Errorf("check lease of session %q: %w", session, err)
	}
	return s.checkHeld(session, row.Owner, row.Epoch)
}

// fenced runs write, a change of session's rows: without leasing on
// the database itself, as before; with leasing in a transaction that
// fences it first (see fence).
func (s *Store) fenced(ctx context.Context, session string, write func(ex sqlx.ExtContext) error) (err error) {
	if !s.leasing {
		return write(s.db)
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = s.fence(ctx, tx, session); err != nil {
		return err
	}
	if err = write(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// leaseRow is a session's lease as stored.
type leaseRow struct {
	ID      string `db:"id"`
	Owner   string `db:"lease_owner"`
	Epoch   int64  `db:"lease_epoch"`
	Expires int64  `db:"lease_expires"`
	Status  string `db:"lease_status"`
	Agent   string `db:"lease_agent"`
}

func (r leaseRow) lease() Lease {
	return Lease{Session: r.ID, Owner: r.Owner, Epoch: r.Epoch, Expires: fromUnix(r.Expires), Open: r.Status != SessionClosed, Agent: r.Agent}
}

func leases(rows []leaseRow) []Lease {
	out := make([]Lease, len(rows))
	for i, r := range rows {
		out[i] = r.lease()
	}
	return out
}

const leaseCols = `id, lease_owner, lease_epoch, lease_expires, status AS lease_status, active_agent AS lease_agent`

// GetLease returns the lease of session as the database has it, or
// ErrNotFound. Without leasing its Owner is this host.
func (s *Store) GetLease(ctx context.Context, session string) (Lease, error) {
	var row leaseRow
	err := s.db.GetContext(ctx, &row, `SELECT `+leaseCols+` FROM sessions WHERE id = ?`, session)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Lease{}, fmt.Errorf("get lease of session %q: %w", session, err)
	}
	l := row.lease()
	if !s.leasing {
		l.Owner = s.cfg.HostID
	}
	return l, nil
}

// Hold makes this store hold session when the database says that this
// host owns it and the lease has not expired: it remembers the epoch and
// renews the lease, unless another run of this host holds it (a run that
// ClaimOwn fenced cannot come back this way). The pool calls it when it loads a session: after a
// hand-over, the new owner learns its epoch this way. It returns an
// error wrapping ErrFenced (naming the owner) when another host owns the
// session, when its lease expired, or when this store held it at another
// epoch (a later start of this host claimed it); ErrNotFound for an
// unknown session. Without leasing it is GetLease.
func (s *Store) Hold(ctx context.Context, session string) (Lease, error) {
	if !s.leasing {
		return s.GetLease(ctx, session)
	}
	var row leaseRow
	err := s.db.GetContext(ctx, &row, `UPDATE sessions SET lease_expires = `+dbNowSQL+` + ?, lease_run = ?
		WHERE id = ? AND lease_owner = ? AND lease_run IN ('', ?) AND lease_expires > `+dbNowSQL+`
		RETURNING `+leaseCols, s.cfg.LeaseTTL.Nanoseconds(), s.leaseRun, session, s.cfg.HostID, s.leaseRun)
	if errors.Is(err, sql.ErrNoRows) {
		l, gerr := s.GetLease(ctx, session)
		if gerr != nil {
			return Lease{}, fmt.Errorf("hold session %q: %w", session, gerr)
		}
		held, _ := s.leases.get(session)
		s.leases.drop(session, held)
		if l.Owner == s.cfg.HostID && l.Expires.After(time.Now()) {
			return Lease{}, fmt.Errorf("hold session %q: another run of host %q holds it at epoch %d: %w",
				session, s.cfg.HostID, l.Epoch, ErrFenced)
		}
		if l.Owner == s.cfg.HostID {
			return Lease{}, fmt.Errorf("hold session %q: its lease expired at epoch %d: %w", session, l.Epoch, ErrFenced)
		}
		return Lease{}, fmt.Errorf("hold: %w", s.fencedError(session, l.Owner, l.Epoch, held))
	}
	if err != nil {
		return Lease{}, fmt.Errorf("hold session %q: %w", session, err)
	}
	if held, ok := s.leases.get(session); ok && held != row.Epoch {
		s.leases.drop(session, held)
		return Lease{}, fmt.Errorf("hold: %w", s.fencedError(session, row.Owner, row.Epoch, held))
	}
	s.leases.set(session, row.Epoch)
	return row.lease(), nil
}

// ClaimOwn is for the start of the daemon: it claims every open session
// leased to this host, or to no host (sessions stored before leases),
// moving each one's epoch on by one, which fences a previous run of this
// host that may still be writing, and renewing the lease. It holds them
// and returns them, by session. Without leasing it returns nothing.
func (s *Store) ClaimOwn(ctx context.Context) ([]Lease, error) {
	if !s.leasing {
		return nil, nil
	}
	var rows []leaseRow
	// The rows are locked in the order of their ids, as the writers
	// lock them (see lockSeqs), so that no deadlock can come of it.
	err := s.db.SelectContext(ctx, &rows, `UPDATE sessions
		SET lease_owner = ?, lease_run = ?, lease_epoch = lease_epoch + 1, lease_expires = `+dbNowSQL+` + ?
		WHERE id IN (SELECT id FROM sessions WHERE status <> ? AND lease_owner IN (?, '') ORDER BY id FOR NO KEY UPDATE)
		RETURNING `+leaseCols, s.cfg.HostID, s.leaseRun, s.cfg.LeaseTTL.Nanoseconds(), SessionClosed, s.cfg.HostID)
	if err != nil {
		return nil, fmt.Errorf("claim own sessions: %w", err)
	}
	slices.SortFunc(rows, func(a, b leaseRow) int { return cmp.Compare(a.ID, b.ID) })
	for _, r := range rows {
		s.leases.set(r.ID, r.Epoch)
	}
	return leases(rows), nil
}

// RenewLeases renews, in one statement, the leases this store holds that
// the database still gives this host at the epoch held. The others (taken
// over, handed over, claimed by a later start of this host, or deleted)
// are no longer held, and returned as lost, by session: the host must
// stop their agents. Without leasing it does nothing.
func (s *Store) RenewLeases(ctx context.Context) (lost []string, err error) {
	if !s.leasing {
		return nil, nil
	}
	ids, epochs := s.leases.snapshot()
	if len(ids) == 0 {
		return nil, nil
	}
	var renewed []string
	err = s.db.SelectContext(ctx, &renewed, `UPDATE sessions SET lease_expires = `+dbNowSQL+` + ?
		WHERE id IN (SELECT s.id FROM sessions s JOIN unnest(?::text[], ?::bigint[]) AS h(id, epoch)
			ON s.id = h.id AND s.lease_epoch = h.epoch
			WHERE s.lease_owner = ? ORDER BY s.id FOR NO KEY UPDATE OF s)
		RETURNING id`, s.cfg.LeaseTTL.Nanoseconds(), ids, epochs, s.cfg.HostID)
	if err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	ok := make(map[string]bool, len(renewed))
	for _, id := range renewed {
		ok[id] = true
	}
	for i, id := range ids {
		if !ok[id] {
			s.leases.drop(id, epochs[i])
			lost = append(lost, id)
		}
	}
	return lost, nil
}

// OwnedLeases returns the open sessions the database leases to this
// host (whatever their expiry), by id: those a drain hands over. Without
// leasing, every open session.
func (s *Store) OwnedLeases(ctx context.Context) ([]Lease, error) {
	var rows []leaseRow
	q, args := `SELECT `+leaseCols+` FROM sessions WHERE status <> ? ORDER BY id`, []any{SessionClosed}
	if s.leasing {
		q, args = `SELECT `+leaseCols+` FROM sessions WHERE status <> ? AND lease_owner = ? ORDER BY id`, []any{SessionClosed, s.cfg.HostID}
	}
	if err := s.db.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, fmt.Errorf("list owned leases: %w", err)
	}
	out := leases(rows)
	if !s.leasing {
		for i := range out {
			out[i].Owner = s.cfg.HostID
		}
	}
	return out, nil
}

// Holds says whether this store holds the lease of session, from memory:
// it held or renewed it and has not lost, released or handed it over
// since. Without leasing it is false.
func (s *Store) Holds(session string) bool {
	if !s.leasing {
		return false
	}
	_, ok := s.leases.get(session)
	return ok
}

// Release forgets the lease this store holds of session (a session
// closed or handed over): its writes are fenced from now on. The
// database's lease is left as it is.
func (s *Store) Release(session string) { s.leases.release(session) }

// ExpiredLeases returns, up to limit (0: all), the open sessions owned by
// another host, or by none, whose lease expired by the database's clock,
// the longest expired first: those another host may take over. Without
// leasing it returns nothing.
func (s *Store) ExpiredLeases(ctx context.Context, limit int) ([]Lease, error) {
	if !s.leasing {
		return nil, nil
	}
	var lim any = s.eng.noLimit()
	if limit > 0 {
		lim = limit
	}
	var rows []leaseRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+leaseCols+` FROM sessions
		WHERE status <> ? AND lease_owner <> ? AND lease_expires < `+dbNowSQL+`
		ORDER BY lease_expires, id LIMIT ?`, SessionClosed, s.cfg.HostID, lim); err != nil {
		return nil, fmt.Errorf("list expired leases: %w", err)
	}
	return leases(rows), nil
}

// RecordPushed records the branch and checkpoint last pushed for session,
// from which another host can take it over (RecordPushedTree without the
// checkpoint's tree). It is fenced (see ErrFenced); it returns
// ErrNotFound for an unknown session.
func (s *Store) RecordPushed(ctx context.Context, session, branch, checkpoint string) error {
	return s.RecordPushedTree(ctx, session, branch, checkpoint, "")
}

// Pushed returns what RecordPushed last recorded for session ("" for
// nothing yet), or ErrNotFound.
func (s *Store) Pushed(ctx context.Context, session string) (branch, checkpoint string, err error) {
	var row struct {
		Branch     string `db:"pushed_branch"`
		Checkpoint string `db:"pushed_checkpoint"`
	}
	err = s.db.GetContext(ctx, &row, `SELECT pushed_branch, pushed_checkpoint FROM sessions WHERE id = ?`, session)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return "", "", fmt.Errorf("get pushed checkpoint of session %q: %w", session, err)
	}
	return row.Branch, row.Checkpoint, nil
}

// heldIDs returns the sessions this store holds, for the recovery reads
// that see only those (see OpenTurns).
func (s *Store) heldIDs() []string {
	ids, _ := s.leases.snapshot()
	return ids
}

// heldScope returns the condition (to append to a WHERE) and its
// arguments that keep, with leasing, only the rows of the sessions this
// store holds and the database still leases to this host, column naming
// their session: the recovery reads at start (after ClaimOwn) see
// nothing of other hosts' sessions. Without leasing it keeps every row.
func (s *Store) heldScope(column string) (string, []any) {
	if !s.leasing {
		return "", nil
	}
	return ` AND ` + column + ` IN (SELECT id FROM sessions WHERE lease_owner = ? AND id = ANY(?))`,
		[]any{s.cfg.HostID, s.heldIDs()}
}
