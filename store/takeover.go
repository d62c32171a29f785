package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/agentpool/agentpool/backends"
)

// Moved is a session's change of owner, by TakeOver or HandOver.
type Moved struct {
	// Lease is the session's new lease.
	Lease Lease
	// From is the host that owned it.
	From string
	// Interrupted are the numbers of the turns the take-over ended.
	Interrupted []int64
	// Events are the events the change stored, with their seqs: the
	// turn.ended of each interrupted turn, then the session.moved; the
	// caller publishes them.
	Events []backends.Event
}

// Reasons of a session.moved event.
const (
	// MoveFailover: the owner stopped heartbeating and its lease
	// expired; another host took the session over.
	MoveFailover = "failover"
	// MoveMove: the owner handed the session to another host on request.
	MoveMove = "move"
	// MoveDrain: the owner handed the session over as it drains.
	MoveDrain = "drain"
)

// EventSessionMoved is the type of the event that reports a session's
// change of owner.
const EventSessionMoved backends.EventType = "session.moved"

// stopInterrupted is the stop reason of a turn ended by a take-over, as
// the pool's recovery ends a turn a previous daemon left running.
const stopInterrupted = "interrupted"

// TakeOver makes this host the owner of session, whose lease expired (its
// owner stopped renewing it): in one transaction, with the session's row
// locked, it moves the epoch on by one (fencing the old owner, should it
// still run), ends every open turn of the session as interrupted, with
// its turn.ended, marks its running agents crashed without signalling
// anything (their processes are the old owner's), and stores a
// session.moved event that says what work is lost (what the old owner
// did after the last pushed checkpoint). The store holds the lease
// afterwards. Of hosts racing to take a session over, one does. It
// returns an error wrapping ErrLeaseHeld when the lease has not expired
// or the session is closed, ErrNotFound for an unknown session, and
// ErrLeaseHeld without leasing (the host owns every session).
func (s *Store) TakeOver(ctx context.Context, session string) (_ Moved, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("take over session %q: %w", session, err)
		}
	}()
	if !s.leasing {
		return Moved{}, fmt.Errorf("leasing is off: %w", ErrLeaseHeld)
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return Moved{}, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	// The old owner may hold the row in a transaction it never ends (it
	// froze mid-write): the wait is bounded, and the database ends such a
	// transaction (see Config.LeaseTTL and postgres.Config), so a later
	// attempt takes it.
	if _, err = tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(s.cfg.LeaseTTL/2, time.Second).Milliseconds())); err != nil {
		return Moved{}, err
	}
	var row struct {
		leaseRow
		Status     string `db:"status"`
		Branch     string `db:"pushed_branch"`
		Checkpoint string `db:"pushed_checkpoint"`
		Tree       string `db:"pushed_tree"`
	}
	err = tx.GetContext(ctx, &row, `SELECT `+leaseCols+`, status, pushed_branch, pushed_checkpoint, pushed_tree
		FROM sessions WHERE id = ? FOR UPDATE`, session)
	if errors.Is(err, sql.ErrNoRows) {
		return Moved{}, ErrNotFound
	}
	if err != nil {
		return Moved{}, err
	}
	// The clock is read once the row is locked: a host that took the
	// session over meanwhile has renewed the lease.
	var now int64
	if err = tx.GetContext(ctx, &now, `SELECT `+dbNowSQL); err != nil {
		return Moved{}, err
	}
	if row.Status == SessionClosed {
		return Moved{}, fmt.Errorf("the session is closed: %w", ErrLeaseHeld)
	}
	if row.Expires >= now {
		return Moved{}, fmt.Errorf("host %q holds it at epoch %d for %s more: %w", row.Owner, row.Epoch,
			time.Duration(row.Expires-now), ErrLeaseHeld)
	}
	m := Moved{From: row.Owner}
	if m.Lease, err = s.moveLease(ctx, tx, session, s.cfg.HostID, s.leaseRun); err != nil {
		return Moved{}, err
	}
	at := s.now().UTC()
	seq := int64(0)
	// store appends ev with the session's next seq.
	store := func(ev backends.Event) error {
		if seq, err = s.eng.nextSeqTx(ctx, tx, session, seq); err != nil {
			return err
		}
		ev.Seq, ev.Session, ev.Time = seq, session, at
		if _, err := tx.ExecContext(ctx, insertEventSQL, session, seq, nullID(ev.Turn), ev.Agent, string(ev.Type),
			nullText(ev.Data), toUnix(at)); err != nil {
			return err
		}
		m.Events = append(m.Events, ev)
		return nil
	}
	// The turns that ended on the old host but whose checkpoint it had
	// not pushed yet (pushes follow the turns' ends).
	unpushed, err := s.unpushedTurns(ctx, tx, session, row.Checkpoint, row.Tree)
	if err != nil {
		return Moved{}, err
	}
	reason := fmt.Sprintf("host %s stopped during the turn", orNobody(row.Owner))
	var turns []interruptedTurn
	if err = tx.SelectContext(ctx, &turns, `UPDATE turns SET stop_reason = ?, error = ?, ended_at = ?
		WHERE session_id = ? AND ended_at IS NULL RETURNING number, agent, started_at`,
		stopInterrupted, reason, toUnix(at), session); err != nil {
		return Moved{}, fmt.Errorf("end open turns: %w", err)
	}
	slices.SortFunc(turns, func(a, b interruptedTurn) int { return cmp.Compare(a.Number, b.Number) })
	m.Interrupted = []int64{}
	for _, t := range turns {
		data := map[string]any{"turn": t.Number, "agent": t.Agent, "stop_reason": stopInterrupted, "error": reason,
			"reason": reason, "duration_ms": at.Sub(fromUnix(t.StartedAt)).Milliseconds()}
		if err = store(backends.Event{Turn: t.Number, Agent: t.Agent, Type: backends.EventTurnEnded,
			Data: backends.MustJSON(data)}); err != nil {
			return Moved{}, fmt.Errorf("report interrupted turn %d: %w", t.Number, err)
		}
		m.Interrupted = append(m.Interrupted, t.Number)
	}
	if _, err = tx.ExecContext(ctx, `UPDATE agent_sessions SET status = ?, last_active_at = ?
		WHERE session_id = ? AND status IN (?, ?)`, AgentCrashed, toUnix(at), session, AgentActive, AgentIdle); err != nil {
		return Moved{}, fmt.Errorf("mark agents crashed: %w", err)
	}
	// Something is lost only when a turn was cut (its changes since the
	// last checkpoint stayed on the old host), when a turn's checkpoint
	// was not pushed yet, or when the session ran turns and none of its
	// checkpoints reached the remote.
	var ran int64
	if err = tx.GetContext(ctx, &ran, `SELECT COUNT(*) FROM turns WHERE session_id = ?`, session); err != nil {
		return Moved{}, fmt.Errorf("count turns: %w", err)
	}
	unpushed = append(unpushed, m.Interrupted...)
	lost := ""
	if len(unpushed) > 0 || (ran > 0 && row.Checkpoint == "") {
		lost = lostSentence(row.Owner, row.Checkpoint, unpushed)
	}
	data := map[string]any{"from": row.Owner, "to": s.cfg.HostID, "epoch": m.Lease.Epoch, "reason": MoveFailover,
		"interrupted_turns": m.Interrupted, "checkpoint": row.Checkpoint, "branch_head": row.Branch,
		"unpushed_turns": unpushed, "lost": lost}
	if err = store(backends.Event{Type: EventSessionMoved, Data: backends.MustJSON(data)}); err != nil {
		return Moved{}, fmt.Errorf("report the move: %w", err)
	}
	if err = tx.Commit(); err != nil {
		return Moved{}, err
	}
	s.leases.set(session, m.Lease.Epoch)
	return m, nil
}

// interruptedTurn is a turn TakeOver ended.
type interruptedTurn struct {
	Number    int64  `db:"number"`
	Agent     string `db:"agent"`
	StartedAt int64  `db:"started_at"`
}

// HandOver gives session, which this store holds, to host to, for reason
// (MoveMove or MoveDrain): in one transaction it makes to the owner at
// the next epoch, with a fresh lease that to takes up with Hold, and
// stores a session.moved event. The store no longer holds the session
// afterwards. The writes queued before it are written first. It returns
// an error wrapping ErrFenced when this store does not hold the session
// at the database's epoch, ErrLeaseHeld when to is empty or this host,
// or without leasing, ErrNotFound for an unknown session.
func (s *Store) HandOver(ctx context.Context, session, to, reason string) (_ Moved, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("hand session %q over to %q: %w", session, to, err)
		}
	}()
	switch {
	case !s.leasing:
		return Moved{}, fmt.Errorf("leasing is off: %w", ErrLeaseHeld)
	case to == "" || to == s.cfg.HostID:
		return Moved{}, fmt.Errorf("no other host to hand it to: %w", ErrLeaseHeld)
	}
	// What this host queued for the session is written while it still
	// holds it.
	if err := s.Flush(ctx); err != nil {
		return Moved{}, err
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return Moved{}, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = s.fence(ctx, tx, session); err != nil {
		return Moved{}, err
	}
	m := Moved{From: s.cfg.HostID, Interrupted: []int64{}}
	if m.Lease, err = s.moveLease(ctx, tx, session, to, ""); err != nil {
		return Moved{}, err
	}
	seq, err := s.eng.nextSeqTx(ctx, tx, session, 0)
	if err != nil {
		return Moved{}, err
	}
	at := s.now().UTC()
	ev := backends.Event{Seq: seq, Session: session, Time: at, Type: EventSessionMoved,
		Data: backends.MustJSON(map[string]any{"from": s.cfg.HostID, "to": to, "epoch": m.Lease.Epoch, "reason": reason, "lost": ""})}
	if _, err = tx.ExecContext(ctx, insertEventSQL, session, seq, nil, "", string(ev.Type), nullText(ev.Data), toUnix(at)); err != nil {
		return Moved{}, fmt.Errorf("report the move: %w", err)
	}
	if err = tx.Commit(); err != nil {
		return Moved{}, err
	}
	m.Events = []backends.Event{ev}
	s.leases.release(session)
	return m, nil
}

// moveLease gives session, whose row tx has locked, to run of owner
// ("": any run of it) at the next epoch with a fresh lease, and returns
// it.
func (s *Store) moveLease(ctx context.Context, tx *sqlx.Tx, session, owner, run string) (Lease, error) {
	var row leaseRow
	err := tx.GetContext(ctx, &row, `UPDATE sessions SET lease_owner = ?, lease_run = ?, lease_epoch = lease_epoch + 1,
		lease_expires = `+dbNowSQL+` + ? WHERE id = ? RETURNING `+leaseCols, owner, run, s.cfg.LeaseTTL.Nanoseconds(), session)
	if err != nil {
		return Lease{}, fmt.Errorf("move the lease: %w", err)
	}
	return row.lease(), nil
}

// lostSentence says, for session.moved, what a take-over from host from
// loses: the work after the last pushed checkpoint (a commit id), that of
// the turns cut (turns) when there were.
func lostSentence(from, checkpoint string, turns []int64) string {
	which := ""
	if len(turns) > 0 {
		ns := make([]string, len(turns))
		for i, n := range turns {
			ns[i] = fmt.Sprint(n)
		}
		word := "turn"
		if len(turns) > 1 {
			word = "turns"
		}
		which = fmt.Sprintf(" (%s %s, which never reached the shared repository)", word, strings.Join(ns, ", "))
	}
	if checkpoint == "" {
		return fmt.Sprintf("work on %s is lost%s: no checkpoint of the session was pushed", orNobody(from), which)
	}
	short := checkpoint
	if len(short) > 12 {
		short = short[:12]
	}
	return fmt.Sprintf("the changes made on %s after the last pushed checkpoint %s are lost%s", orNobody(from), short, which)
}

// orNobody names host from in messages.
func orNobody(host string) string {
	if host == "" {
		return "(no host)"
	}
	return host
}
