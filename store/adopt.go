package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/agentpool/agentpool/backends"
)

// The statements CreateSession, PutWorktree and UpsertAgentSession run,
// shared with AdoptSession, which runs them in one transaction.
const (
	insertSessionSQL = `INSERT INTO sessions (` + sessionCols + `)
		VALUES (:id, :repo, :base_ref, :title, :active_agent, :status, :created_at, :updated_at, :mcp_servers)`
	// insertLeasedSessionSQL is insertSessionSQL with the session leased
	// to :lease_owner at epoch 1 for :lease_ttl (see leasedSessionRow).
	insertLeasedSessionSQL = `INSERT INTO sessions (` + sessionCols + `, lease_owner, lease_run, lease_epoch, lease_expires)
		VALUES (:id, :repo, :base_ref, :title, :active_agent, :status, :created_at, :updated_at, :mcp_servers,
			:lease_owner, :lease_run, 1, ` + dbNowSQL + ` + :lease_ttl)`
	putWorktreeSQL = `INSERT INTO session_worktrees (` + worktreeCols + `)
		VALUES (:session_id, :path, :branch, :base_commit, :created_at, :removed_at, :host)
		ON CONFLICT (session_id) DO UPDATE SET path = excluded.path, branch = excluded.branch,
			base_commit = excluded.base_commit, created_at = excluded.created_at, removed_at = excluded.removed_at,
			host = excluded.host`
	upsertAgentSQL = `INSERT INTO agent_sessions (` + agentCols + `)
		VALUES (:session_id, :agent, :kind, :agent_session_id, :pid, :pgid, :pid_start_ticks, :status, :restarts,
			:resume_supported, :mode, :config_options, :provider_spec_hash, :last_active_at, :created_at)
		ON CONFLICT (session_id, agent) DO UPDATE SET kind = excluded.kind,
			agent_session_id = excluded.agent_session_id, pid = excluded.pid, pgid = excluded.pgid,
			pid_start_ticks = excluded.pid_start_ticks, status = excluded.status, restarts = excluded.restarts,
			resume_supported = excluded.resume_supported, mode = excluded.mode,
			config_options = excluded.config_options, provider_spec_hash = excluded.provider_spec_hash,
			last_active_at = excluded.last_active_at`
)

// AdoptSession stores a session made ahead (a spare) at once: its row
// (as CreateSession), its worktree (as PutWorktree) and its running
// agent (as UpsertAgentSession, with what the agent advertised when
// advertised is not nil), all in one transaction, so that it is never
// stored in part. With leasing the session is leased to this host at
// epoch 1, and held. It returns ErrExists if the id is taken. It is
// QueueAdoption followed by the adoption's Wait.
func (s *Store) AdoptSession(ctx context.Context, sess Session, wt WorktreeRow, a AgentSession, advertised []byte) error {
	ad, err := s.QueueAdoption(ctx, sess, wt, a, advertised, backends.Event{}, nil, nil)
	if err != nil {
		return err
	}
	return ad.Wait(ctx)
}

// Adoption is a session's adoption queued by QueueAdoption.
type Adoption struct {
	s    *Store
	id   string
	wait *waited // nil when the adoption was written before QueueAdoption returned
	err  error   // its outcome then
}

// Wait waits until the adoption is committed, and returns nil, or was
// refused (ErrExists when the id is taken), or ctx ended while it was not
// being written, in which case it is never written.
func (a *Adoption) Wait(ctx context.Context) error {
	if a.wait == nil {
		return a.err
	}
	if err := a.s.awaitWaited(ctx, a.wait); err != nil {
		return fmt.Errorf("adopt session %q: %w", a.id, err)
	}
	return nil
}

// QueueAdoption is AdoptSession without the wait, with the session's
// first event and its first turn: first (unless its Session is empty) is
// appended with the adoption, as by AppendNotify, and stored only if the
// adoption is; turn, when not nil, is the row of the session's first
// turn, number 1, as StartTurn writes it (its SessionID is the session's),
// stored with the adoption or not at all, so that a create that starts a
// turn at once waits for one commit, not two. On
// SQLite the session's rows and first are queued to the writer as one
// item, committed in one transaction, the rows in a savepoint of their
// own (a refused statement undoes the others): a caller that waits for
// the first event pays one commit, not two. On PostgreSQL, and with
// leasing, where an event's seq comes from the session's row locked when
// its transaction starts, the adoption is written before QueueAdoption
// returns, and first is appended after it.
func (s *Store) QueueAdoption(ctx context.Context, sess Session, wt WorktreeRow, a AgentSession, advertised []byte, first backends.Event, committed func(backends.Event), turn *Turn) (*Adoption, error) {
	row, err := s.sessionRowOf(sess)
	if err != nil {
		return nil, err
	}
	agent, err := s.agentRowOf(a)
	if err != nil {
		return nil, err
	}
	if err := validOptions(advertised); err != nil {
		return nil, fmt.Errorf("adopt session %q: advertised: %w", sess.ID, err)
	}
	if first.Session != "" && first.Session != sess.ID {
		return nil, fmt.Errorf("adopt session %q: its first event is of session %q", sess.ID, first.Session)
	}
	var tw *write
	if turn != nil {
		t := *turn
		t.SessionID = sess.ID
		if tw, err = s.startTurnWrite(t); err != nil {
			return nil, err
		}
	}
	if s.eng.postgres || s.leasing {
		err := s.adoptNow(ctx, row, wt, agent, advertised, tw)
		if err == nil && first.Session != "" {
			s.AppendNotify(first, committed)
		}
		return &Adoption{s: s, id: sess.ID, err: err}, nil
	}
	q, arg := s.insertSession(row)
	named := []struct {
		query string
		arg   any
	}{{q, arg}, {putWorktreeSQL, s.worktreeRowOf(wt)}, {upsertAgentSQL, agent}}
	group := make([]stmt, 0, len(named)+1)
	for _, n := range named {
		query, args, err := s.db.BindNamed(n.query, n.arg)
		if err != nil {
			return nil, fmt.Errorf("adopt session %q: %w", sess.ID, err)
		}
		group = append(group, stmt{query: query, args: args})
	}
	if advertised != nil {
		group = append(group, stmt{query: setAdvertisedSQL, args: []any{nullText(advertised), sess.ID, a.Agent}})
	}
	if tw != nil {
		// The session's first turn: the group's savepoint makes it stored
		// with the session or not at all (the session's id may be taken).
		group = append(group, stmt{query: insertTurnSQL, args: tw.args})
	}
	w := &write{what: "adopt session " + strconv.Quote(sess.ID), session: sess.ID, group: group, wait: newWaited()}
	it := item{w: w}
	if first.Session != "" {
		it.ev, it.committed = first, committed
	}
	_, err = s.queue.push(it, s.cfg.AppendWait)
	if err := s.enqueued(w, err); err != nil {
		return nil, err
	}
	return &Adoption{s: s, id: sess.ID, wait: w.wait}, nil
}

// setAdvertisedSQL records what an agent advertised.
const setAdvertisedSQL = `UPDATE agent_sessions SET advertised = ? WHERE session_id = ? AND agent = ?`

// adoptNow writes an adoption, and the first turn's row tw unless it is
// nil, in a transaction of its own.
func (s *Store) adoptNow(ctx context.Context, row sessionRow, wt WorktreeRow, agent agentRow, advertised []byte, tw *write) (err error) {
	id := row.ID
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("adopt session %q: %w", id, s.mapWriteErr(err))
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	q, arg := s.insertSession(row)
	if _, err = tx.NamedExecContext(ctx, q, arg); err != nil {
		return fmt.Errorf("adopt session %q: %w", id, s.mapWriteErr(err))
	}
	if _, err = tx.NamedExecContext(ctx, putWorktreeSQL, s.worktreeRowOf(wt)); err != nil {
		return fmt.Errorf("adopt session %q: worktree: %w", id, s.mapWriteErr(err))
	}
	if _, err = tx.NamedExecContext(ctx, upsertAgentSQL, agent); err != nil {
		return fmt.Errorf("adopt session %q: agent %q: %w", id, agent.Agent, s.mapWriteErr(err))
	}
	if advertised != nil {
		if _, err = tx.ExecContext(ctx, setAdvertisedSQL, nullText(advertised), id, agent.Agent); err != nil {
			return fmt.Errorf("adopt session %q: advertised of agent %q: %w", id, agent.Agent, s.mapWriteErr(err))
		}
	}
	if tw != nil {
		var number int64
		if err = tx.QueryRowxContext(ctx, tw.query, tw.args...).Scan(&number); err != nil {
			return fmt.Errorf("adopt session %q: %s: %w", id, tw.what, s.mapWriteErr(err))
		}
		if number != 1 {
			err = fmt.Errorf("adopt session %q: its first turn got number %d", id, number)
			return err
		}
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("adopt session %q: commit: %w", id, s.mapWriteErr(err))
	}
	s.holdNew(id)
	return nil
}

// leasedSessionRow is a new session's row leased to LeaseOwner.
type leasedSessionRow struct {
	sessionRow
	LeaseOwner string `db:"lease_owner"`
	LeaseRun   string `db:"lease_run"`
	// LeaseTTL is the lease's length in ns, from the database's clock.
	LeaseTTL int64 `db:"lease_ttl"`
}

// insertSession returns the named statement that inserts row, and its
// argument: with leasing, the session leased to this host at epoch 1.
func (s *Store) insertSession(row sessionRow) (string, any) {
	if !s.leasing {
		return insertSessionSQL, row
	}
	return insertLeasedSessionSQL, leasedSessionRow{sessionRow: row, LeaseOwner: s.cfg.HostID, LeaseRun: s.leaseRun, LeaseTTL: s.cfg.LeaseTTL.Nanoseconds()}
}

// holdNew holds the lease of a session this store has just created.
func (s *Store) holdNew(id string) {
	if s.leasing {
		s.leases.set(id, 1)
	}
}

// sessionRowOf checks sess and makes its row: Status defaults to
// SessionOpen, CreatedAt (when zero) comes from the clock and UpdatedAt
// is CreatedAt.
func (s *Store) sessionRowOf(sess Session) (sessionRow, error) {
	if sess.ID == "" {
		return sessionRow{}, errors.New("create session: empty id")
	}
	if sess.Status == "" {
		sess.Status = SessionOpen
	}
	sess.CreatedAt = s.orNow(sess.CreatedAt).UTC()
	sess.UpdatedAt = sess.CreatedAt
	return sessionRow{
		ID: sess.ID, Repo: sess.Repo, BaseRef: sess.BaseRef, Title: sess.Title,
		ActiveAgent: sess.ActiveAgent, Status: sess.Status,
		CreatedAt: toUnix(sess.CreatedAt), UpdatedAt: toUnix(sess.UpdatedAt), MCPServers: sess.MCPServers,
	}, nil
}

// worktreeRowOf makes w's row, CreatedAt from the clock when zero.
func (s *Store) worktreeRowOf(w WorktreeRow) worktreeRow {
	row := worktreeRow{
		SessionID: w.SessionID, Path: w.Path, Branch: w.Branch, BaseCommit: w.BaseCommit,
		CreatedAt: toUnix(s.orNow(w.CreatedAt)), Host: s.cfg.HostID,
	}
	if w.RemovedAt != nil {
		at := toUnix(*w.RemovedAt)
		row.RemovedAt = &at
	}
	return row
}
