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

// PermissionRow is the audit record of one permission request and its
// decision.
type PermissionRow struct {
	// ID is the request id; it must be unique in the database, across
	// restarts of the daemon.
	ID        string
	SessionID string
	// Turn is the number (within its session) of the turn the request
	// came from, 0 if none.
	Turn   int64
	Agent  string
	Action string
	Risk   string
	// Request is the request as the agent sent it (JSON).
	Request json.RawMessage
	// Decision, DecidedBy and OptionKind stay empty until a decision.
	Decision    string
	DecidedBy   string
	OptionKind  string
	RequestedAt time.Time
	// DecidedAt is nil until a decision.
	DecidedAt *time.Time
}

// PermissionDecision is what ResolvePermission records.
type PermissionDecision struct {
	Decision   string
	DecidedBy  string
	OptionKind string
}

type permissionRow struct {
	ID          string  `db:"id"`
	SessionID   string  `db:"session_id"`
	Turn        *int64  `db:"turn"`
	Agent       string  `db:"agent"`
	Action      string  `db:"action"`
	Risk        string  `db:"risk"`
	Request     *string `db:"request"`
	Decision    string  `db:"decision"`
	DecidedBy   string  `db:"decided_by"`
	OptionKind  string  `db:"option_kind"`
	RequestedAt int64   `db:"requested_at"`
	DecidedAt   *int64  `db:"decided_at"`
}

func (r permissionRow) permission() PermissionRow {
	p := PermissionRow{
		ID: r.ID, SessionID: r.SessionID, Agent: r.Agent, Action: r.Action, Risk: r.Risk,
		Decision: r.Decision, DecidedBy: r.DecidedBy, OptionKind: r.OptionKind,
		RequestedAt: fromUnix(r.RequestedAt), DecidedAt: fromNullUnix(r.DecidedAt),
	}
	if r.Turn != nil {
		p.Turn = *r.Turn
	}
	if r.Request != nil {
		p.Request = json.RawMessage(*r.Request)
	}
	return p
}

const permissionCols = `id, session_id, turn, agent, action, risk, request, decision, decided_by, option_kind,
	requested_at, decided_at`

// InsertPermission records p; RequestedAt defaults to now, and a p that is
// already decided may carry its DecidedAt. It returns ErrExists for a taken
// id and ErrNotFound if the session does not exist.
func (s *Store) InsertPermission(ctx context.Context, p PermissionRow) error {
	if p.ID == "" {
		return errors.New("insert permission: empty id")
	}
	row := permissionRow{
		ID: p.ID, SessionID: p.SessionID, Turn: nullID(p.Turn), Agent: p.Agent, Action: p.Action,
		Risk: p.Risk, Request: nullText(p.Request), Decision: p.Decision, DecidedBy: p.DecidedBy,
		OptionKind: p.OptionKind, RequestedAt: toUnix(s.orNow(p.RequestedAt)),
	}
	if p.DecidedAt != nil {
		at := toUnix(*p.DecidedAt)
		row.DecidedAt = &at
	}
	err := s.fenced(ctx, p.SessionID, func(ex sqlx.ExtContext) error {
		_, err := sqlx.NamedExecContext(ctx, ex, `INSERT INTO permissions (`+permissionCols+`)
		VALUES (:id, :session_id, :turn, :agent, :action, :risk, :request, :decision, :decided_by, :option_kind,
			:requested_at, :decided_at)`, row)
		return err
	})
	if err != nil {
		return fmt.Errorf("insert permission %q: %w", p.ID, s.mapWriteErr(err))
	}
	return nil
}

// ResolvePermission records the decision on request id, stamped now. It
// returns ErrNotFound for an unknown id.
func (s *Store) ResolvePermission(ctx context.Context, id string, d PermissionDecision) error {
	write := func(ex sqlx.ExtContext) error {
		res, err := ex.ExecContext(ctx, `UPDATE permissions SET decision = ?, decided_by = ?, option_kind = ?, decided_at = ?
		WHERE id = ?`, d.Decision, d.DecidedBy, d.OptionKind, toUnix(s.now()), id)
		if err == nil {
			err = mustAffect(res)
		}
		return err
	}
	var err error
	if !s.leasing {
		err = write(s.db)
	} else {
		// Fenced by the session of the request.
		var session string
		err = s.db.GetContext(ctx, &session, `SELECT session_id FROM permissions WHERE id = ?`, id)
		if errors.Is(err, sql.ErrNoRows) {
			err = ErrNotFound
		}
		if err == nil {
			err = s.fenced(ctx, session, write)
		}
	}
	if err != nil {
		return fmt.Errorf("resolve permission %q: %w", id, err)
	}
	return nil
}

// ListPermissions returns the permission requests of sessionID, oldest first.
func (s *Store) ListPermissions(ctx context.Context, sessionID string) ([]PermissionRow, error) {
	var rows []permissionRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+permissionCols+` FROM permissions WHERE session_id = ?
		ORDER BY requested_at, id`, sessionID); err != nil {
		return nil, fmt.Errorf("list permissions of session %q: %w", sessionID, err)
	}
	out := make([]PermissionRow, len(rows))
	for i, r := range rows {
		out[i] = r.permission()
	}
	return out, nil
}
