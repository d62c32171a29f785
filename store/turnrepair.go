package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/agentpool/agentpool/backends"
)

// typeTurnEnded is the type of the event that reports a turn's end.
const typeTurnEnded = string(backends.EventTurnEnded)

// unreportedTurnEndsSQL selects the ended turns without a turn.ended. The
// type is written out, not bound, so that SQLite can use the partial index
// events_turn_ended.
const unreportedTurnEndsSQL = `SELECT ` + turnCols + ` FROM turns t
	WHERE t.ended_at IS NOT NULL AND NOT EXISTS (
		SELECT 1 FROM events e WHERE e.session_id = t.session_id AND e.turn = t.number AND e.type = 'turn.ended')`

// UnreportedTurnEnds returns the turns that have ended but have no
// turn.ended event, in the order they were stored. A turn ended through
// EndTurnEvent always has its event; these are turns whose end row an
// earlier version committed apart from its event, which a crash between
// the two lost. Each turn costs one lookup in an index of turn.ended
// events, not a read of its session's stream. With leasing it sees only
// the sessions this store holds (call it after ClaimOwn).
func (s *Store) UnreportedTurnEnds(ctx context.Context) ([]Turn, error) {
	if err := s.awaitWrites(ctx); err != nil {
		return nil, fmt.Errorf("list unreported turn ends: %w", err)
	}
	scope, args := s.heldScope("t.session_id")
	var rows []turnRow
	if err := s.db.SelectContext(ctx, &rows, unreportedTurnEndsSQL+scope+` ORDER BY t.id`, args...); err != nil {
		return nil, fmt.Errorf("list unreported turn ends: %w", err)
	}
	out := make([]Turn, len(rows))
	for i, r := range rows {
		out[i] = r.turn()
	}
	return out, nil
}

// ReportTurnEnd queues ev, the turn.ended of turn number of ev.Session,
// which has ended without it (see UnreportedTurnEnds), and returns without
// waiting for the write. ev is stored (and committed called with it, as
// for AppendNotify) only if, when its transaction runs, the turn has ended
// and still has no turn.ended: repairing a turn twice stores one event.
// A turn that is open, unknown or already reported is logged and counted
// in Stats.Rejected. It returns an error when ev is not a turn.ended of
// that turn, ErrBehind when the write queue stayed full, ErrClosed after
// Close.
func (s *Store) ReportTurnEnd(ctx context.Context, number int64, ev backends.Event, committed func(backends.Event)) error {
	if ev.Session == "" || string(ev.Type) != typeTurnEnded || ev.Turn != number {
		return fmt.Errorf("report end of turn %d: event %s of turn %d in session %q is not its turn.ended", number, ev.Type, ev.Turn, ev.Session)
	}
	w := &write{
		what: "report end of turn " + strconv.FormatInt(number, 10) + " of session " + strconv.Quote(ev.Session),
		// The update changes nothing; it matches the turn only when the
		// event may be stored, which the writer's item requires.
		query: `UPDATE turns SET ended_at = ended_at
			WHERE session_id = ?1 AND number = ?2 AND ended_at IS NOT NULL AND NOT EXISTS (
				SELECT 1 FROM events e WHERE e.session_id = ?1 AND e.turn = ?2 AND e.type = 'turn.ended')`,
		args:   []any{ev.Session, number},
		affect: true,
		orphan: "turn open, unknown or already reported",
	}
	_, err := s.queue.push(item{w: w, ev: ev, committed: committed}, s.cfg.AppendWait)
	return s.enqueued(w, err)
}
