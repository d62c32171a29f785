package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"
)

// Session statuses the pool uses; the store accepts any non-empty status.
const (
	SessionOpen   = "open"
	SessionClosed = "closed"
)

// Session is one agentpool session: a repository, its worktree and the
// agents that worked in it.
type Session struct {
	ID          string
	Repo        string
	BaseRef     string
	Title       string
	ActiveAgent string
	Status      string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// MCPServers is the session's own MCP servers as the pool encodes
	// them (JSON), "" for none. It holds secrets.
	MCPServers string
	// Host is the host that holds the session's lease (PostgreSQL shared
	// by several hosts); read only, "" when none does.
	Host string
}

type sessionRow struct {
	ID          string `db:"id"`
	Repo        string `db:"repo"`
	BaseRef     string `db:"base_ref"`
	Title       string `db:"title"`
	ActiveAgent string `db:"active_agent"`
	Status      string `db:"status"`
	CreatedAt   int64  `db:"created_at"`
	UpdatedAt   int64  `db:"updated_at"`
	MCPServers  string `db:"mcp_servers"`
	LeaseOwner  string `db:"lease_owner"`
}

func (r sessionRow) session() Session {
	return Session{
		ID: r.ID, Repo: r.Repo, BaseRef: r.BaseRef, Title: r.Title,
		ActiveAgent: r.ActiveAgent, Status: r.Status,
		CreatedAt: fromUnix(r.CreatedAt), UpdatedAt: fromUnix(r.UpdatedAt), MCPServers: r.MCPServers, Host: r.LeaseOwner,
	}
}

const sessionCols = `id, repo, base_ref, title, active_agent, status, created_at, updated_at, mcp_servers`

// sessionReadCols are the columns a read of a session gets: sessionCols
// and the host holding its lease.
const sessionReadCols = sessionCols + `, lease_owner`

// CreateSession inserts sess and returns it as stored: Status defaults to
// SessionOpen, and CreatedAt (when zero) and UpdatedAt come from the clock.
// With leasing the session is leased to this host at epoch 1, and held.
// It returns ErrExists if the id is taken.
func (s *Store) CreateSession(ctx context.Context, sess Session) (Session, error) {
	row, err := s.sessionRowOf(sess)
	if err != nil {
		return Session{}, err
	}
	q, arg := s.insertSession(row)
	if _, err := s.db.NamedExecContext(ctx, q, arg); err != nil {
		return Session{}, fmt.Errorf("create session %q: %w", sess.ID, s.mapWriteErr(err))
	}
	s.holdNew(row.ID)
	return row.session(), nil
}

// CreateSessionWorktree inserts sess, as CreateSession does, and its
// worktree wt (as PutWorktree) in one transaction: a session is never
// stored without the worktree it was made with, even when the daemon
// stops between the two. It returns ErrExists if the id is taken,
// storing neither.
func (s *Store) CreateSessionWorktree(ctx context.Context, sess Session, wt WorktreeRow) (_ Session, err error) {
	row, err := s.sessionRowOf(sess)
	if err != nil {
		return Session{}, err
	}
	if wt.SessionID != sess.ID {
		return Session{}, fmt.Errorf("create session %q: its worktree is of session %q", sess.ID, wt.SessionID)
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return Session{}, fmt.Errorf("create session %q: %w", sess.ID, s.mapWriteErr(err))
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	q, arg := s.insertSession(row)
	if _, err := tx.NamedExecContext(ctx, q, arg); err != nil {
		return Session{}, fmt.Errorf("create session %q: %w", sess.ID, s.mapWriteErr(err))
	}
	if _, err := tx.NamedExecContext(ctx, putWorktreeSQL, s.worktreeRowOf(wt)); err != nil {
		return Session{}, fmt.Errorf("create session %q: its worktree: %w", sess.ID, s.mapWriteErr(err))
	}
	if err := tx.Commit(); err != nil {
		return Session{}, fmt.Errorf("create session %q: %w", sess.ID, s.mapWriteErr(err))
	}
	s.holdNew(row.ID)
	return row.session(), nil
}

// GetSession returns the session id, or ErrNotFound.
func (s *Store) GetSession(ctx context.Context, id string) (Session, error) {
	if err := s.awaitWrites(ctx); err != nil {
		return Session{}, fmt.Errorf("get session %q: %w", id, err)
	}
	var row sessionRow
	err := s.db.GetContext(ctx, &row, `SELECT `+sessionReadCols+` FROM sessions WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("get session %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("get session %q: %w", id, err)
	}
	return row.session(), nil
}

// ListSessions returns every session, oldest first.
func (s *Store) ListSessions(ctx context.Context) ([]Session, error) {
	if err := s.awaitWrites(ctx); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	var rows []sessionRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+sessionReadCols+` FROM sessions ORDER BY created_at, id`); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	out := make([]Session, len(rows))
	for i, r := range rows {
		out[i] = r.session()
	}
	return out, nil
}

// DeleteClosedSession deletes session id, which must be closed
// (SessionClosed), with everything recorded about it: its worktree row,
// agents, turns, events and permission records. It waits for the writes
// queued before it first. It returns ErrNotFound when there is no closed
// session id.
func (s *Store) DeleteClosedSession(ctx context.Context, id string) error {
	if err := s.flushUnlessFull(ctx); err != nil {
		return fmt.Errorf("delete session %q: %w", id, err)
	}
	if s.eng.postgres {
		return s.deleteClosedPostgres(ctx, id)
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM sessions WHERE id = ? AND status = ?`, id, SessionClosed)
	if err == nil {
		err = mustAffect(res)
	}
	if err != nil {
		return fmt.Errorf("delete session %q: %w", id, s.mapWriteErr(err))
	}
	return nil
}

// deleteClosedPostgres is DeleteClosedSession on PostgreSQL, where events
// have no foreign key (see migrations_pg/0011_prompt_keys.sql): the session's row goes
// first, which waits for a writer holding it, then its events, in the same
// transaction; a writer coming later finds no row and refuses the
// session's events.
func (s *Store) deleteClosedPostgres(ctx context.Context, id string) (err error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("delete session %q: %w", id, err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE id = ? AND status = ?`, id, SessionClosed)
	if err == nil {
		err = mustAffect(res)
	}
	if err == nil {
		_, err = tx.ExecContext(ctx, `DELETE FROM events WHERE session_id = ?`, id)
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return fmt.Errorf("delete session %q: %w", id, s.mapWriteErr(err))
	}
	return nil
}

// UpdateSessionStatus sets the status of session id and stamps UpdatedAt.
// It is fenced (see ErrFenced). It returns ErrNotFound for an unknown id.
func (s *Store) UpdateSessionStatus(ctx context.Context, id, status string) error {
	if status == "" {
		return fmt.Errorf("update session %q: empty status", id)
	}
	return s.updateSession(ctx, id, "status", status)
}

// SetActiveAgent records agent as the one session id talks to now and stamps
// UpdatedAt. Like StartTurn it queues the write behind the events appended
// before it and returns at once; the store's reads of sessions wait for
// it, and an unknown id is logged and counted in Stats.Rejected. It returns
// ErrBehind when the write queue stayed full, ErrClosed after Close.
func (s *Store) SetActiveAgent(ctx context.Context, id, agent string) error {
	return s.enqueue(&write{
		what:    "set active agent of session " + strconv.Quote(id),
		session: id,
		query:   `UPDATE sessions SET active_agent = ?, updated_at = ? WHERE id = ?`,
		args:    []any{agent, toUnix(s.now()), id},
		affect:  true,
		orphan:  "unknown session",
	})
}

// updateSession sets one column, named by the caller (never by user input).
func (s *Store) updateSession(ctx context.Context, id, column, value string) error {
	err := s.fenced(ctx, id, func(ex sqlx.ExtContext) error {
		res, err := ex.ExecContext(ctx, `UPDATE sessions SET `+column+` = ?, updated_at = ? WHERE id = ?`,
			value, toUnix(s.now()), id)
		if err == nil {
			err = mustAffect(res)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("update session %q %s: %w", id, column, s.mapWriteErr(err))
	}
	return nil
}

// WorktreeRow records the git worktree of a session.
type WorktreeRow struct {
	SessionID  string
	Path       string
	Branch     string
	BaseCommit string
	CreatedAt  time.Time
	// RemovedAt is set once the worktree directory is gone.
	RemovedAt *time.Time
	// Host is the host whose disk holds the worktree: the store's
	// HostID when it was recorded (PutWorktree ignores the field).
	Host string
}

type worktreeRow struct {
	SessionID  string `db:"session_id"`
	Path       string `db:"path"`
	Branch     string `db:"branch"`
	BaseCommit string `db:"base_commit"`
	CreatedAt  int64  `db:"created_at"`
	RemovedAt  *int64 `db:"removed_at"`
	Host       string `db:"host"`
}

func (r worktreeRow) worktree() WorktreeRow {
	return WorktreeRow{
		SessionID: r.SessionID, Path: r.Path, Branch: r.Branch, BaseCommit: r.BaseCommit,
		CreatedAt: fromUnix(r.CreatedAt), RemovedAt: fromNullUnix(r.RemovedAt), Host: r.Host,
	}
}

const worktreeCols = `session_id, path, branch, base_commit, created_at, removed_at, host`

// PutWorktree records (or replaces) the worktree of w.SessionID, with
// CreatedAt from the clock when zero, RemovedAt as given and Host this
// store's HostID. It is fenced (see ErrFenced). It returns ErrNotFound if
// the session does not exist.
func (s *Store) PutWorktree(ctx context.Context, w WorktreeRow) error {
	err := s.fenced(ctx, w.SessionID, func(ex sqlx.ExtContext) error {
		_, err := sqlx.NamedExecContext(ctx, ex, putWorktreeSQL, s.worktreeRowOf(w))
		return err
	})
	if err != nil {
		return fmt.Errorf("put worktree of session %q: %w", w.SessionID, s.mapWriteErr(err))
	}
	return nil
}

// GetWorktree returns the worktree of sessionID, or ErrNotFound.
func (s *Store) GetWorktree(ctx context.Context, sessionID string) (WorktreeRow, error) {
	var row worktreeRow
	err := s.db.GetContext(ctx, &row, `SELECT `+worktreeCols+` FROM session_worktrees WHERE session_id = ?`, sessionID)
	if errors.Is(err, sql.ErrNoRows) {
		return WorktreeRow{}, fmt.Errorf("get worktree of session %q: %w", sessionID, ErrNotFound)
	}
	if err != nil {
		return WorktreeRow{}, fmt.Errorf("get worktree of session %q: %w", sessionID, err)
	}
	return row.worktree(), nil
}

// MarkWorktreeRemoved stamps the worktree of sessionID as removed now. A
// worktree already marked keeps its first time. It returns ErrNotFound when
// the session has no worktree row. It is fenced (see ErrFenced).
func (s *Store) MarkWorktreeRemoved(ctx context.Context, sessionID string) error {
	err := s.fenced(ctx, sessionID, func(ex sqlx.ExtContext) error {
		res, err := ex.ExecContext(ctx, `UPDATE session_worktrees SET removed_at = COALESCE(removed_at, ?) WHERE session_id = ?`,
			toUnix(s.now()), sessionID)
		if err == nil {
			err = mustAffect(res)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("mark worktree of session %q removed: %w", sessionID, s.mapWriteErr(err))
	}
	return nil
}

// ListWorktrees returns the worktree rows, oldest first; removed ones only
// when includeRemoved is true.
func (s *Store) ListWorktrees(ctx context.Context, includeRemoved bool) ([]WorktreeRow, error) {
	q := `SELECT ` + worktreeCols + ` FROM session_worktrees`
	if !includeRemoved {
		q += ` WHERE removed_at IS NULL`
	}
	var rows []worktreeRow
	if err := s.db.SelectContext(ctx, &rows, q+` ORDER BY created_at, session_id`); err != nil {
		return nil, fmt.Errorf("list worktrees: %w", err)
	}
	out := make([]WorktreeRow, len(rows))
	for i, r := range rows {
		out[i] = r.worktree()
	}
	return out, nil
}
