package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// TurnUsage is the token count of one turn, as its agent reported it in
// the prompt answer's usage.
type TurnUsage struct {
	SessionID string `db:"session_id"`
	// Turn is the turn's number in its session.
	Turn        int64  `db:"turn"`
	Agent       string `db:"agent"`
	Input       int64  `db:"input_tokens"`
	Output      int64  `db:"output_tokens"`
	CachedRead  int64  `db:"cached_read"`
	CachedWrite int64  `db:"cached_write"`
	Thought     int64  `db:"thought"`
	Total       int64  `db:"total"`
}

// TokenSum is the sum of the TurnUsage rows of one (session, agent).
type TokenSum struct {
	SessionID   string `db:"session_id"`
	Agent       string `db:"agent"`
	Turns       int64  `db:"turns"`
	Input       int64  `db:"input_tokens"`
	Output      int64  `db:"output_tokens"`
	CachedRead  int64  `db:"cached_read"`
	CachedWrite int64  `db:"cached_write"`
	Thought     int64  `db:"thought"`
	Total       int64  `db:"total"`
}

// AgentUsage is what one agent session of a (session, agent) pair last
// reported: its context occupancy and its cumulative cost.
type AgentUsage struct {
	SessionID      string
	Agent          string
	AgentSessionID string
	ContextUsed    int64
	ContextSize    int64
	// Cost is nil until the agent reports one; Currency is its currency.
	Cost      *float64
	Currency  string
	UpdatedAt time.Time
}

type agentUsageRow struct {
	SessionID      string   `db:"session_id"`
	Agent          string   `db:"agent"`
	AgentSessionID string   `db:"agent_session_id"`
	ContextUsed    int64    `db:"context_used"`
	ContextSize    int64    `db:"context_size"`
	Cost           *float64 `db:"cost"`
	Currency       string   `db:"currency"`
	UpdatedAt      int64    `db:"updated_at"`
}

// Budget is a session's own limit: nil fields set none.
type Budget struct {
	Tokens   *int64
	Cost     *float64
	Currency string
}

// PutTurnUsage records the tokens of a turn, replacing what was recorded
// for it. It returns ErrNotFound for an unknown session.
func (s *Store) PutTurnUsage(ctx context.Context, u TurnUsage) error {
	err := s.fenced(ctx, u.SessionID, func(ex sqlx.ExtContext) error {
		_, err := ex.ExecContext(ctx, `INSERT INTO turn_usage
		(session_id, turn, agent, input_tokens, output_tokens, cached_read, cached_write, thought, total, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (session_id, turn) DO UPDATE SET agent = excluded.agent,
			input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens,
			cached_read = excluded.cached_read, cached_write = excluded.cached_write,
			thought = excluded.thought, total = excluded.total`,
			u.SessionID, u.Turn, u.Agent, u.Input, u.Output, u.CachedRead, u.CachedWrite, u.Thought, u.Total, toUnix(s.now()))
		return err
	})
	if err != nil {
		return fmt.Errorf("put usage of turn %d of session %q: %w", u.Turn, u.SessionID, s.mapWriteErr(err))
	}
	return nil
}

// ListTurnUsage returns the token counts of the turns of a session that
// have one, by turn number.
func (s *Store) ListTurnUsage(ctx context.Context, sessionID string) ([]TurnUsage, error) {
	var out []TurnUsage
	err := s.db.SelectContext(ctx, &out, `SELECT session_id, turn, agent, input_tokens, output_tokens,
		cached_read, cached_write, thought, total FROM turn_usage WHERE session_id = ? ORDER BY turn`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list turn usage of session %q: %w", sessionID, err)
	}
	return out, nil
}

// SumTurnUsage sums the token counts per (session, agent): of one session,
// or of every session when sessionID is empty. A sum past the bounds of
// int64 is held at them rather than fail the query.
func (s *Store) SumTurnUsage(ctx context.Context, sessionID string) ([]TokenSum, error) {
	q := `SELECT session_id, agent, count(*) AS turns`
	for _, col := range []string{"input_tokens", "output_tokens", "cached_read", "cached_write", "thought", "total"} {
		q += ", " + s.clampedSum(col) + " AS " + col
	}
	q += ` FROM turn_usage`
	var args []any
	if sessionID != "" {
		q += ` WHERE session_id = ?`
		args = append(args, sessionID)
	}
	q += ` GROUP BY session_id, agent ORDER BY session_id, agent`
	var out []TokenSum
	if err := s.db.SelectContext(ctx, &out, q, args...); err != nil {
		return nil, fmt.Errorf("sum turn usage: %w", err)
	}
	return out, nil
}

// clampedSum is the SQL of the sum of the integer column col, held within
// the bounds of int64: SQLite's sum() fails on an overflow (total() is a
// float, which a CAST to INTEGER saturates), PostgreSQL's is a numeric
// that would not scan into an int64.
func (s *Store) clampedSum(col string) string {
	if s.eng.postgres {
		return "GREATEST(LEAST(sum(" + col + "), 9223372036854775807), -9223372036854775808)::bigint"
	}
	return "CAST(total(" + col + ") AS INTEGER)"
}

// PutAgentUsage records what an agent session last reported. Zero context
// figures and a nil Cost leave the recorded ones as they are (an update may
// carry only some of them). It returns ErrNotFound for an unknown session.
func (s *Store) PutAgentUsage(ctx context.Context, u AgentUsage) error {
	err := s.fenced(ctx, u.SessionID, func(ex sqlx.ExtContext) error {
		_, err := ex.ExecContext(ctx, `INSERT INTO agent_usage
		(session_id, agent, agent_session_id, context_used, context_size, cost, currency, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (session_id, agent, agent_session_id) DO UPDATE SET
			context_used = CASE WHEN excluded.context_size > 0 OR excluded.context_used > 0 THEN excluded.context_used ELSE agent_usage.context_used END,
			context_size = CASE WHEN excluded.context_size > 0 THEN excluded.context_size ELSE agent_usage.context_size END,
			cost = COALESCE(excluded.cost, agent_usage.cost),
			currency = CASE WHEN excluded.cost IS NOT NULL THEN excluded.currency ELSE agent_usage.currency END,
			updated_at = excluded.updated_at`,
			u.SessionID, u.Agent, u.AgentSessionID, u.ContextUsed, u.ContextSize, u.Cost, u.Currency, toUnix(s.orNow(u.UpdatedAt)))
		return err
	})
	if err != nil {
		return fmt.Errorf("put usage of agent %q of session %q: %w", u.Agent, u.SessionID, s.mapWriteErr(err))
	}
	return nil
}

// ListAgentUsage returns what the agent sessions reported, of one session
// or of every session when sessionID is empty, most recent last.
func (s *Store) ListAgentUsage(ctx context.Context, sessionID string) ([]AgentUsage, error) {
	q := `SELECT session_id, agent, agent_session_id, context_used, context_size, cost, currency, updated_at FROM agent_usage`
	var args []any
	if sessionID != "" {
		q += ` WHERE session_id = ?`
		args = append(args, sessionID)
	}
	q += ` ORDER BY updated_at, session_id, agent`
	var rows []agentUsageRow
	if err := s.db.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, fmt.Errorf("list agent usage: %w", err)
	}
	out := make([]AgentUsage, len(rows))
	for i, r := range rows {
		out[i] = AgentUsage{SessionID: r.SessionID, Agent: r.Agent, AgentSessionID: r.AgentSessionID,
			ContextUsed: r.ContextUsed, ContextSize: r.ContextSize, Cost: r.Cost, Currency: r.Currency,
			UpdatedAt: fromUnix(r.UpdatedAt)}
	}
	return out, nil
}

// SetSessionBudget sets a session's budget; a Budget with no limit
// removes it. It returns ErrNotFound for an unknown session.
func (s *Store) SetSessionBudget(ctx context.Context, sessionID string, b Budget) error {
	err := s.fenced(ctx, sessionID, func(ex sqlx.ExtContext) error {
		if b.Tokens == nil && b.Cost == nil {
			_, err := ex.ExecContext(ctx, `DELETE FROM session_budgets WHERE session_id = ?`, sessionID)
			return err
		}
		_, err := ex.ExecContext(ctx, `INSERT INTO session_budgets (session_id, tokens, cost, currency, updated_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET tokens = excluded.tokens,
			cost = excluded.cost, currency = excluded.currency, updated_at = excluded.updated_at`,
			sessionID, b.Tokens, b.Cost, b.Currency, toUnix(s.now()))
		return err
	})
	if err != nil {
		return fmt.Errorf("set budget of session %q: %w", sessionID, s.mapWriteErr(err))
	}
	return nil
}

// SessionBudget returns a session's budget; ok is false when it has none.
func (s *Store) SessionBudget(ctx context.Context, sessionID string) (b Budget, ok bool, err error) {
	var row struct {
		Tokens   *int64   `db:"tokens"`
		Cost     *float64 `db:"cost"`
		Currency string   `db:"currency"`
	}
	err = s.db.GetContext(ctx, &row, `SELECT tokens, cost, currency FROM session_budgets WHERE session_id = ?`, sessionID)
	if errors.Is(err, sql.ErrNoRows) {
		return Budget{}, false, nil
	}
	if err != nil {
		return Budget{}, false, fmt.Errorf("get budget of session %q: %w", sessionID, err)
	}
	return Budget{Tokens: row.Tokens, Cost: row.Cost, Currency: row.Currency}, true, nil
}
