package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// HistoryCopy says what CopyHistory copies from one session to another.
type HistoryCopy struct {
	// From is the session whose history is copied, To the session that
	// receives it, which must exist and have no event and no turn yet.
	From, To string
	// Turn is the last turn copied: the ended turns numbered 1..Turn are,
	// and the events of no later turn (0: no turn at all).
	Turn int64
	// AtTurn cuts the events at Turn's last one: nothing that happened
	// after it is copied. Without it every event of the session outside
	// later turns is (what happened since its last turn, a running turn
	// left out).
	AtTurn bool
}

// CopiedHistory is what CopyHistory copied.
type CopiedHistory struct {
	// Events counts the events copied; they are To's seqs 1..Events.
	Events int64 `json:"events"`
	// Turns counts the turns copied, which keep their numbers.
	Turns int64 `json:"turns"`
	// Reviews counts the reviews copied: those of the turns copied, with
	// their comments as judged (the open ones are in To's briefings).
	Reviews int64 `json:"reviews"`
}

// CopyHistory copies the history of c.From into c.To, in one
// transaction: its ended turns up to c.Turn, which keep their numbers
// (To's next turn is the one after), and its events (see HistoryCopy),
// which keep their order, turn, agent, type, data and time and get To's
// own seqs, from 1 with no gap, and the reviews of the turns copied. It reads the events written: Flush before
// to copy those still queued. An error wraps ErrNotFound when c.To is no
// session; nothing is copied then, nor on any other error.
func (s *Store) CopyHistory(ctx context.Context, c HistoryCopy) (CopiedHistory, error) {
	var out CopiedHistory
	if c.From == "" || c.To == "" || c.From == c.To {
		return out, fmt.Errorf("copy history from %q to %q: two different sessions are needed", c.From, c.To)
	}
	if c.Turn < 0 {
		return out, fmt.Errorf("copy history from %q: turn %d", c.From, c.Turn)
	}
	if err := s.awaitWrites(ctx); err != nil {
		return out, fmt.Errorf("copy history from %q: %w", c.From, err)
	}
	var turns []turnRow
	if err := s.db.SelectContext(ctx, &turns, `SELECT `+turnCols+` FROM turns
		WHERE session_id = ? AND number <= ? AND ended_at IS NOT NULL ORDER BY number`, c.From, c.Turn); err != nil {
		return out, fmt.Errorf("copy history from %q: read its turns: %w", c.From, err)
	}
	cut := int64(-1) // no bound
	if c.AtTurn && c.Turn > 0 {
		if err := s.db.GetContext(ctx, &cut, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ? AND turn = ?`, c.From, c.Turn); err != nil {
			return out, fmt.Errorf("copy history from %q: find turn %d's last event: %w", c.From, c.Turn, err)
		}
	}
	err := s.inTx(ctx, c.To, func(ex sqlx.ExtContext) error {
		var n int64
		if err := sqlx.GetContext(ctx, ex, &n, `SELECT COUNT(*) FROM sessions WHERE id = ?`, c.To); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("session %q: %w", c.To, ErrNotFound)
		}
		res, err := ex.ExecContext(ctx, `INSERT INTO events (session_id, seq, turn, agent, type, data, created_at)
			SELECT ?, ROW_NUMBER() OVER (ORDER BY seq), turn, agent, type, data, created_at FROM events
			WHERE session_id = ? AND (turn IS NULL OR turn <= ?) AND (? < 0 OR seq <= ?)
			ORDER BY seq`, c.To, c.From, c.Turn, cut, cut)
		if err != nil {
			return fmt.Errorf("copy events: %w", err)
		}
		if out.Events, err = res.RowsAffected(); err != nil {
			return err
		}
		for _, t := range turns {
			args := []any{c.To, t.Number, t.Agent, t.Prompt, t.StopReason, t.Error, t.CheckpointBefore, t.CheckpointAfter, t.StartedAt, t.EndedAt}
			q := `INSERT INTO turns (session_id, number, agent, prompt, stop_reason, error, checkpoint_before, checkpoint_after, started_at, ended_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
			if !s.eng.postgres {
				// SQLite: the row id is the store's own (see StartTurn).
				q = `INSERT INTO turns (id, session_id, number, agent, prompt, stop_reason, error, checkpoint_before, checkpoint_after, started_at, ended_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
				args = append([]any{s.turnSeq.Add(1)}, args...)
			}
			if _, err := ex.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("copy turn %d: %w", t.Number, err)
			}
			out.Turns++
		}
		if len(turns) > 0 {
			res, err := ex.ExecContext(ctx, `INSERT INTO reviews (session_id, turn, summary, comments, judged, created_at)
				SELECT ?, turn, summary, comments, judged, created_at FROM reviews WHERE session_id = ? AND turn <= ?`,
				c.To, c.From, turns[len(turns)-1].Number)
			if err != nil {
				return fmt.Errorf("copy reviews: %w", err)
			}
			if out.Reviews, err = res.RowsAffected(); err != nil {
				return err
			}
		}
		if s.eng.postgres {
			// The session's counters hand out the next seq and number.
			var last int64
			if len(turns) > 0 {
				last = turns[len(turns)-1].Number
			}
			if _, err := ex.ExecContext(ctx, `UPDATE sessions SET last_turn = ?, last_seq = ? WHERE id = ?`, last, out.Events, c.To); err != nil {
				return fmt.Errorf("count the copied turns and events: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return CopiedHistory{}, fmt.Errorf("copy history from %q to %q: %w", c.From, c.To, s.mapWriteErr(err))
	}
	return out, nil
}

// inTx runs write in one transaction, fenced first with leasing (see
// fenced, which without leasing runs it on the database itself).
func (s *Store) inTx(ctx context.Context, session string, write func(ex sqlx.ExtContext) error) (err error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if s.leasing {
		if err = s.fence(ctx, tx, session); err != nil {
			return err
		}
	}
	if err = write(tx); err != nil {
		return err
	}
	return tx.Commit()
}
