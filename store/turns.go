package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Turn is one prompt and its outcome, with the worktree checkpoints taken
// before and after it.
type Turn struct {
	ID               int64
	SessionID        string
	Agent            string
	Prompt           string
	StopReason       string
	Error            string
	CheckpointBefore string
	CheckpointAfter  string
	StartedAt        time.Time
	// EndedAt is nil while the turn runs.
	EndedAt *time.Time
}

// TurnEnd is how a turn ended, recorded by EndTurn.
type TurnEnd struct {
	StopReason      string
	Error           string
	CheckpointAfter string
	// EndedAt is when it ended (zero: when EndTurn is called).
	EndedAt time.Time
}

type turnRow struct {
	ID               int64  `db:"id"`
	SessionID        string `db:"session_id"`
	Agent            string `db:"agent"`
	Prompt           string `db:"prompt"`
	StopReason       string `db:"stop_reason"`
	Error            string `db:"error"`
	CheckpointBefore string `db:"checkpoint_before"`
	CheckpointAfter  string `db:"checkpoint_after"`
	StartedAt        int64  `db:"started_at"`
	EndedAt          *int64 `db:"ended_at"`
}

func (r turnRow) turn() Turn {
	return Turn{
		ID: r.ID, SessionID: r.SessionID, Agent: r.Agent, Prompt: r.Prompt,
		StopReason: r.StopReason, Error: r.Error,
		CheckpointBefore: r.CheckpointBefore, CheckpointAfter: r.CheckpointAfter,
		StartedAt: fromUnix(r.StartedAt), EndedAt: fromNullUnix(r.EndedAt),
	}
}

const turnCols = `id, session_id, agent, prompt, stop_reason, error, checkpoint_before, checkpoint_after, started_at, ended_at`

// StartTurn queues the row of a running turn of t.SessionID (t.ID, t.EndedAt
// and the end fields are ignored; StartedAt defaults to now) and returns its
// id, increasing within the database, without waiting for the write: the
// row is written in order with the events appended before and after it,
// and the store's reads of turns wait for it. A row the database refuses
// (an unknown session) is logged and counted in Stats.Rejected. It returns
// ErrBehind when the write queue stayed full, ErrClosed after Close.
func (s *Store) StartTurn(ctx context.Context, t Turn) (int64, error) {
	if t.SessionID == "" {
		return 0, errors.New("start turn: empty session id")
	}
	id := s.turnSeq.Add(1)
	err := s.enqueue(&write{
		what: "start turn " + strconv.FormatInt(id, 10) + " of session " + strconv.Quote(t.SessionID),
		query: `INSERT INTO turns (id, session_id, agent, prompt, checkpoint_before, started_at)
			VALUES (?, ?, ?, ?, ?, ?)`,
		args: []any{id, t.SessionID, t.Agent, t.Prompt, t.CheckpointBefore, toUnix(s.orNow(t.StartedAt))},
	})
	if err != nil {
		return 0, err
	}
	return id, nil
}

// EndTurn queues how turn id ended, stamped end.EndedAt (zero: now), and
// returns without waiting for the write, like StartTurn. An unknown turn or
// one that has already ended is logged and counted in Stats.Rejected, and
// keeps its first end.
func (s *Store) EndTurn(ctx context.Context, id int64, end TurnEnd) error {
	what := "end turn " + strconv.FormatInt(id, 10)
	return s.enqueue(&write{
		what: what,
		query: `UPDATE turns SET stop_reason = ?, error = ?, checkpoint_after = ?, ended_at = ?
			WHERE id = ? AND ended_at IS NULL`,
		args:   []any{end.StopReason, end.Error, end.CheckpointAfter, toUnix(s.orNow(end.EndedAt)), id},
		affect: true,
		orphan: "turn unknown or already ended",
	})
}

// EndOpenTurns ends every turn still running with stop reason "error" and
// the message errText; it is for the startup sweep, when no turn can still be
// running. It returns the number of turns ended.
func (s *Store) EndOpenTurns(ctx context.Context, errText string) (int64, error) {
	if err := s.awaitWrites(ctx); err != nil {
		return 0, fmt.Errorf("end open turns: %w", err)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE turns SET stop_reason = 'error', error = ?, ended_at = ?
		WHERE ended_at IS NULL`, errText, toUnix(s.now()))
	if err != nil {
		return 0, fmt.Errorf("end open turns: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("end open turns: %w", err)
	}
	return n, nil
}

// GetTurn returns turn id, or ErrNotFound.
func (s *Store) GetTurn(ctx context.Context, id int64) (Turn, error) {
	if err := s.awaitWrites(ctx); err != nil {
		return Turn{}, fmt.Errorf("get turn %d: %w", id, err)
	}
	var row turnRow
	err := s.db.GetContext(ctx, &row, `SELECT `+turnCols+` FROM turns WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Turn{}, fmt.Errorf("get turn %d: %w", id, err)
	}
	return row.turn(), nil
}

// ListTurns returns the turns of sessionID in the order they started.
func (s *Store) ListTurns(ctx context.Context, sessionID string) ([]Turn, error) {
	if err := s.awaitWrites(ctx); err != nil {
		return nil, fmt.Errorf("list turns of session %q: %w", sessionID, err)
	}
	var rows []turnRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+turnCols+` FROM turns WHERE session_id = ? ORDER BY id`,
		sessionID); err != nil {
		return nil, fmt.Errorf("list turns of session %q: %w", sessionID, err)
	}
	out := make([]Turn, len(rows))
	for i, r := range rows {
		out[i] = r.turn()
	}
	return out, nil
}

// LastTurn returns the latest turn of sessionID, or ErrNotFound when it has
// none.
func (s *Store) LastTurn(ctx context.Context, sessionID string) (Turn, error) {
	if err := s.awaitWrites(ctx); err != nil {
		return Turn{}, fmt.Errorf("last turn of session %q: %w", sessionID, err)
	}
	var row turnRow
	err := s.db.GetContext(ctx, &row, `SELECT `+turnCols+` FROM turns WHERE session_id = ? ORDER BY id DESC LIMIT 1`,
		sessionID)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Turn{}, fmt.Errorf("last turn of session %q: %w", sessionID, err)
	}
	return row.turn(), nil
}
