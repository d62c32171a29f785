package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// RememberedPermission is an answer a session remembers for the later
// permission requests of one agent's action: a person's allow_always or
// reject_always.
type RememberedPermission struct {
	SessionID  string
	Agent      string
	Action     string
	OptionKind string
	// RequestID is the request whose answer this is.
	RequestID string
	// DecidedAt defaults to now.
	DecidedAt time.Time
}

type rememberedRow struct {
	SessionID  string `db:"session_id"`
	Agent      string `db:"agent"`
	Action     string `db:"action"`
	OptionKind string `db:"option_kind"`
	RequestID  string `db:"request_id"`
	DecidedAt  int64  `db:"decided_at"`
}

// RememberPermission stores r, replacing what the session remembered for
// the same (agent, action). It returns ErrNotFound if the session does not
// exist, and, with leasing, an error wrapping ErrFenced when this host does
// not hold the session.
func (s *Store) RememberPermission(ctx context.Context, r RememberedPermission) error {
	if r.SessionID == "" || r.OptionKind == "" {
		return errors.New("remember permission: empty session or option kind")
	}
	row := rememberedRow{SessionID: r.SessionID, Agent: r.Agent, Action: r.Action, OptionKind: r.OptionKind,
		RequestID: r.RequestID, DecidedAt: toUnix(s.orNow(r.DecidedAt))}
	err := s.fenced(ctx, r.SessionID, func(ex sqlx.ExtContext) error {
		_, err := sqlx.NamedExecContext(ctx, ex, `INSERT INTO remembered_permissions
			(session_id, agent, action, option_kind, request_id, decided_at)
		VALUES (:session_id, :agent, :action, :option_kind, :request_id, :decided_at)
		ON CONFLICT (session_id, agent, action) DO UPDATE SET
			option_kind = excluded.option_kind, request_id = excluded.request_id, decided_at = excluded.decided_at`, row)
		return err
	})
	if err != nil {
		return fmt.Errorf("remember permission of session %q (%s %s): %w", r.SessionID, r.Agent, r.Action, s.mapWriteErr(err))
	}
	return nil
}

// RememberedPermissions returns the answers session remembers, by agent
// and action; none for an unknown session.
func (s *Store) RememberedPermissions(ctx context.Context, session string) ([]RememberedPermission, error) {
	var rows []rememberedRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT session_id, agent, action, option_kind, request_id, decided_at
		FROM remembered_permissions WHERE session_id = ? ORDER BY agent, action`, session); err != nil {
		return nil, fmt.Errorf("remembered permissions of session %q: %w", session, err)
	}
	out := make([]RememberedPermission, len(rows))
	for i, r := range rows {
		out[i] = RememberedPermission{SessionID: r.SessionID, Agent: r.Agent, Action: r.Action, OptionKind: r.OptionKind,
			RequestID: r.RequestID, DecidedAt: fromUnix(r.DecidedAt)}
	}
	return out, nil
}

// ForgetPermissions deletes the answers session remembers (it closes).
// Forgetting a session that remembers nothing, or does not exist, is not
// an error.
func (s *Store) ForgetPermissions(ctx context.Context, session string) error {
	err := s.fenced(ctx, session, func(ex sqlx.ExtContext) error {
		_, err := ex.ExecContext(ctx, `DELETE FROM remembered_permissions WHERE session_id = ?`, session)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("forget permissions of session %q: %w", session, s.mapWriteErr(err))
	}
	return nil
}
