package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// SetAgentAdvertised records what the agent of (sessionID, agent) last
// advertised (a JSON object: its modes, config options and commands),
// replacing what was recorded. It is the only writer of that column:
// UpsertAgentSession leaves it alone. It returns ErrNotFound for an
// unknown pair.
func (s *Store) SetAgentAdvertised(ctx context.Context, sessionID, agent string, advertised json.RawMessage) error {
	err := validOptions(advertised)
	if err == nil {
		err = s.fenced(ctx, sessionID, func(ex sqlx.ExtContext) error {
			res, err := ex.ExecContext(ctx, `UPDATE agent_sessions SET advertised = ? WHERE session_id = ? AND agent = ?`,
				nullText(advertised), sessionID, agent)
			if err == nil {
				return mustAffect(res)
			}
			return s.mapWriteErr(err)
		})
	}
	if err != nil {
		return fmt.Errorf("set advertised of agent %q of session %q: %w", agent, sessionID, err)
	}
	return nil
}

// AgentAdvertised returns what SetAgentAdvertised recorded for (sessionID,
// agent): nil when nothing was, ErrNotFound for an unknown pair.
func (s *Store) AgentAdvertised(ctx context.Context, sessionID, agent string) (json.RawMessage, error) {
	var raw *string
	err := s.db.GetContext(ctx, &raw, `SELECT advertised FROM agent_sessions WHERE session_id = ? AND agent = ?`,
		sessionID, agent)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get advertised of agent %q of session %q: %w", agent, sessionID, err)
	}
	if raw == nil {
		return nil, nil
	}
	return json.RawMessage(*raw), nil
}
