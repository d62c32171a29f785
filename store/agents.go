package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// Statuses of an agent session (a (session, agent) backend).
const (
	// AgentIdle: the process is running and waits for a prompt.
	AgentIdle = "idle"
	// AgentActive: the process is running a turn.
	AgentActive = "active"
	// AgentCrashed: the process ended unexpectedly; the next prompt restarts it.
	AgentCrashed = "crashed"
	// AgentClosed: the process was stopped on purpose.
	AgentClosed = "closed"
)

// AgentSession is the record of one (session, agent) backend: what to resume
// and what process to find again after a restart of the daemon.
type AgentSession struct {
	SessionID string
	Agent     string
	// Kind is the backend kind ("acp" or "pty").
	Kind string
	// AgentSessionID is the agent's own session id, the resume token.
	AgentSessionID string
	PID            int
	PGID           int
	// StartTicks is the start time of PID from /proc/<pid>/stat, to tell the
	// recorded process from a later one that reuses the pid.
	StartTicks uint64
	// Status is one of AgentIdle, AgentActive, AgentCrashed, AgentClosed.
	Status   string
	Restarts int
	// ResumeSupported is true when the agent can load AgentSessionID.
	ResumeSupported bool
	// Mode is the session mode last set, re-applied after a restart.
	Mode string
	// ConfigOptions maps config option id to value (a JSON object),
	// re-applied after a restart.
	ConfigOptions json.RawMessage
	// SpecHash identifies the launch spec the process was started with.
	SpecHash string
	// LastActiveAt is the time of the last upsert or status change.
	LastActiveAt time.Time
	CreatedAt    time.Time
}

type agentRow struct {
	SessionID       string  `db:"session_id"`
	Agent           string  `db:"agent"`
	Kind            string  `db:"kind"`
	AgentSessionID  string  `db:"agent_session_id"`
	PID             int     `db:"pid"`
	PGID            int     `db:"pgid"`
	StartTicks      int64   `db:"pid_start_ticks"`
	Status          string  `db:"status"`
	Restarts        int     `db:"restarts"`
	ResumeSupported bool    `db:"resume_supported"`
	Mode            string  `db:"mode"`
	ConfigOptions   *string `db:"config_options"`
	SpecHash        string  `db:"provider_spec_hash"`
	LastActiveAt    int64   `db:"last_active_at"`
	CreatedAt       int64   `db:"created_at"`
}

func (r agentRow) agentSession() AgentSession {
	a := AgentSession{
		SessionID: r.SessionID, Agent: r.Agent, Kind: r.Kind, AgentSessionID: r.AgentSessionID,
		PID: r.PID, PGID: r.PGID, StartTicks: uint64(r.StartTicks), Status: r.Status,
		Restarts: r.Restarts, ResumeSupported: r.ResumeSupported, Mode: r.Mode,
		SpecHash: r.SpecHash, LastActiveAt: fromUnix(r.LastActiveAt), CreatedAt: fromUnix(r.CreatedAt),
	}
	if r.ConfigOptions != nil {
		a.ConfigOptions = json.RawMessage(*r.ConfigOptions)
	}
	return a
}

const agentCols = `session_id, agent, kind, agent_session_id, pid, pgid, pid_start_ticks, status, restarts,
	resume_supported, mode, config_options, provider_spec_hash, last_active_at, created_at`

// UpsertAgentSession (fenced, see ErrFenced) records a, replacing the row of (a.SessionID, a.Agent)
// except its CreatedAt. LastActiveAt and CreatedAt default to now. It returns
// ErrNotFound if the session does not exist, and an error for an unknown
// status or ConfigOptions that are not a JSON object.
func (s *Store) UpsertAgentSession(ctx context.Context, a AgentSession) error {
	row, err := s.agentRowOf(a)
	if err != nil {
		return err
	}
	err = s.fenced(ctx, a.SessionID, func(ex sqlx.ExtContext) error {
		_, err := sqlx.NamedExecContext(ctx, ex, upsertAgentSQL, row)
		return err
	})
	if err != nil {
		return fmt.Errorf("upsert agent %q of session %q: %w", a.Agent, a.SessionID, s.mapWriteErr(err))
	}
	return nil
}

// GetAgentSession returns the record of (sessionID, agent), or ErrNotFound.
func (s *Store) GetAgentSession(ctx context.Context, sessionID, agent string) (AgentSession, error) {
	var row agentRow
	err := s.db.GetContext(ctx, &row, `SELECT `+agentCols+` FROM agent_sessions WHERE session_id = ? AND agent = ?`,
		sessionID, agent)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return AgentSession{}, fmt.Errorf("get agent %q of session %q: %w", agent, sessionID, err)
	}
	return row.agentSession(), nil
}

// ListAgentSessions returns the agents of sessionID, oldest first.
func (s *Store) ListAgentSessions(ctx context.Context, sessionID string) ([]AgentSession, error) {
	return s.listAgents(ctx, `WHERE session_id = ?`, sessionID)
}

// ListLiveAgentSessions returns, across sessions, the agents recorded as
// running (AgentActive or AgentIdle).
func (s *Store) ListLiveAgentSessions(ctx context.Context) ([]AgentSession, error) {
	return s.listAgents(ctx, `WHERE status IN ('active', 'idle')`)
}

func (s *Store) listAgents(ctx context.Context, where string, args ...any) ([]AgentSession, error) {
	var rows []agentRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+agentCols+` FROM agent_sessions `+where+
		` ORDER BY created_at, session_id, agent`, args...); err != nil {
		return nil, fmt.Errorf("list agent sessions: %w", err)
	}
	out := make([]AgentSession, len(rows))
	for i, r := range rows {
		out[i] = r.agentSession()
	}
	return out, nil
}

// SetAgentStatus sets the status of (sessionID, agent) and stamps
// LastActiveAt. It returns ErrNotFound for an unknown pair.
func (s *Store) SetAgentStatus(ctx context.Context, sessionID, agent, status string) error {
	err := validAgentStatus(status)
	if err == nil {
		err = s.fenced(ctx, sessionID, func(ex sqlx.ExtContext) error {
			res, err := ex.ExecContext(ctx, `UPDATE agent_sessions SET status = ?, last_active_at = ?
			WHERE session_id = ? AND agent = ?`, status, toUnix(s.now()), sessionID, agent)
			if err == nil {
				err = mustAffect(res)
			}
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("set agent %q of session %q to %s: %w", agent, sessionID, status, err)
	}
	return nil
}

// SetAgentMode records the session mode of (sessionID, agent). It returns
// ErrNotFound for an unknown pair.
func (s *Store) SetAgentMode(ctx context.Context, sessionID, agent, mode string) error {
	err := s.fenced(ctx, sessionID, func(ex sqlx.ExtContext) error {
		res, err := ex.ExecContext(ctx, `UPDATE agent_sessions SET mode = ? WHERE session_id = ? AND agent = ?`,
			mode, sessionID, agent)
		if err == nil {
			err = mustAffect(res)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("set mode of agent %q of session %q: %w", agent, sessionID, err)
	}
	return nil
}

// SetAgentConfigOption records value for config option id in the
// ConfigOptions of (sessionID, agent), keeping the other options. It returns
// ErrNotFound for an unknown pair.
func (s *Store) SetAgentConfigOption(ctx context.Context, sessionID, agent, id, value string) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("set config option %q of agent %q of session %q: %w", id, agent, sessionID, err)
		}
	}()
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := s.fence(ctx, tx, sessionID); err != nil {
		return err
	}
	var raw *string
	err = tx.GetContext(ctx, &raw, `SELECT config_options FROM agent_sessions WHERE session_id = ? AND agent = ?`,
		sessionID, agent)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	opts := map[string]json.RawMessage{}
	if raw != nil {
		if err := json.Unmarshal([]byte(*raw), &opts); err != nil {
			return fmt.Errorf("stored options: %w", err)
		}
	}
	opts[id] = mustString(value)
	b, err := json.Marshal(opts)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE agent_sessions SET config_options = ? WHERE session_id = ? AND agent = ?`,
		string(b), sessionID, agent); err != nil {
		return err
	}
	return tx.Commit()
}

// MarkStaleAgentSessions is the startup sweep: in one transaction it turns
// every AgentActive row into AgentCrashed and every AgentIdle row into
// AgentClosed, and returns those rows as they were before (with their PID,
// PGID and StartTicks, so that the caller can kill the recorded groups).
// With leasing it sees only the sessions this store holds (call it after
// ClaimOwn): the others' agents are other hosts' processes.
func (s *Store) MarkStaleAgentSessions(ctx context.Context) (_ []AgentSession, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("mark stale agent sessions: %w", err)
		}
	}()
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	scope, args := s.heldScope("session_id")
	var rows []agentRow
	if err := tx.SelectContext(ctx, &rows, `SELECT `+agentCols+` FROM agent_sessions
		WHERE status IN ('active', 'idle')`+scope+` ORDER BY created_at, session_id, agent`, args...); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE agent_sessions
		SET status = CASE status WHEN 'active' THEN 'crashed' ELSE 'closed' END
		WHERE status IN ('active', 'idle')`+scope, args...); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	out := make([]AgentSession, len(rows))
	for i, r := range rows {
		out[i] = r.agentSession()
	}
	return out, nil
}

func validAgentStatus(status string) error {
	switch status {
	case AgentIdle, AgentActive, AgentCrashed, AgentClosed:
		return nil
	}
	return fmt.Errorf("unknown agent status %q", status)
}

func validOptions(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return errors.New("config options must be a JSON object")
	}
	return nil
}

// orTime returns t, or def when t is zero.
func orTime(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}

// mustString returns v as a JSON string; strings always marshal.
func mustString(v string) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// agentRowOf checks a and makes its row, its times defaulting to now.
func (s *Store) agentRowOf(a AgentSession) (agentRow, error) {
	if err := validAgentStatus(a.Status); err != nil {
		return agentRow{}, fmt.Errorf("upsert agent %q of session %q: %w", a.Agent, a.SessionID, err)
	}
	if err := validOptions(a.ConfigOptions); err != nil {
		return agentRow{}, fmt.Errorf("upsert agent %q of session %q: %w", a.Agent, a.SessionID, err)
	}
	now := s.now()
	row := agentRow{
		SessionID: a.SessionID, Agent: a.Agent, Kind: a.Kind, AgentSessionID: a.AgentSessionID,
		PID: a.PID, PGID: a.PGID, StartTicks: int64(a.StartTicks), Status: a.Status,
		Restarts: a.Restarts, ResumeSupported: a.ResumeSupported, Mode: a.Mode,
		ConfigOptions: nullText(a.ConfigOptions), SpecHash: a.SpecHash,
		LastActiveAt: toUnix(orTime(a.LastActiveAt, now)), CreatedAt: toUnix(orTime(a.CreatedAt, now)),
	}
	return row, nil
}
