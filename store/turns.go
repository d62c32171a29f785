package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Turn is one prompt and its outcome, with the worktree checkpoints taken
// before and after it. A turn is known as (SessionID, Number); ID is the
// row's key within the database, for the store's own use.
type Turn struct {
	ID        int64
	SessionID string
	// Number is the turn's place in its session: 1 for the first turn.
	Number           int64
	Agent            string
	Prompt           string
	StopReason       string
	Error            string
	CheckpointBefore string
	CheckpointAfter  string
	StartedAt        time.Time
	// EndedAt is nil while the turn runs.
	EndedAt *time.Time
	// RequestKey is the key the prompt that started the turn carried
	// (see TurnByKey); "" for none. Only StartTurn reads it.
	RequestKey string
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
	Number           int64  `db:"number"`
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
		ID: r.ID, SessionID: r.SessionID, Number: r.Number, Agent: r.Agent, Prompt: r.Prompt,
		StopReason: r.StopReason, Error: r.Error,
		CheckpointBefore: r.CheckpointBefore, CheckpointAfter: r.CheckpointAfter,
		StartedAt: fromUnix(r.StartedAt), EndedAt: fromNullUnix(r.EndedAt),
	}
}

const turnCols = `id, session_id, number, agent, prompt, stop_reason, error, checkpoint_before, checkpoint_after, started_at, ended_at`

// StartTurn writes the row of a running turn of t.SessionID (t.ID,
// t.Number, t.EndedAt and the end fields are ignored; StartedAt defaults to
// now) and returns its number in the session (one more than the session's
// last turn, 1 for its first) once the row has committed: a number it
// returns is durable and never handed out again for the session. The
// number is assigned by the write itself, so turns that fail to start
// leave no gap. The row goes through the writer's queue, in order with the
// events appended before and after it (StartTurn cuts the writer's
// FlushInterval short).
//
// It returns an error wrapping ErrFull as soon as an attempt to write the
// row fails because the disk is full (the row is then never written, even
// once space returns), ErrNotFound for an unknown session, ErrBehind when
// the write queue stayed full, ErrClosed when the store closes first, and
// the context's error when ctx ends first (the row is then not written
// either, unless it was already committing, in which case StartTurn waits
// for that attempt).
func (s *Store) StartTurn(ctx context.Context, t Turn) (int64, error) {
	w, err := s.startTurnWrite(t)
	if err != nil {
		return 0, err
	}
	if err := s.enqueue(w); err != nil {
		return 0, err
	}
	if err := s.awaitWaited(ctx, w.wait); err != nil {
		return 0, fmt.Errorf("%s: %w", w.what, err)
	}
	return w.wait.value(), nil
}

// insertTurnSQL inserts a turn's row on SQLite, numbered one past the
// session's last turn. StartTurn's write returns that number; a
// session's adoption runs it as it is (see QueueAdoption): a statement
// left returning rows would hold the savepoint and the transaction open.
const insertTurnSQL = `INSERT INTO turns (id, session_id, number, agent, prompt, checkpoint_before, started_at, request_key)
			VALUES (?1, ?2, (SELECT COALESCE(MAX(number), 0) + 1 FROM turns WHERE session_id = ?2), ?3, ?4, ?5, ?6, ?7)`

// startTurnWrite is the write of StartTurn's row.
func (s *Store) startTurnWrite(t Turn) (*write, error) {
	if t.SessionID == "" {
		return nil, errors.New("start turn: empty session id")
	}
	w := &write{
		session:   t.SessionID,
		wait:      newWaited(),
		returning: true,
	}
	if s.eng.postgres {
		// Several stores may share the database: the row id comes from
		// the table's identity column, the number from the session's row,
		// which the statement moves (and holds until the commit). No
		// session row, no turn row, no number: the write is refused.
		w.what = "start turn of session " + strconv.Quote(t.SessionID)
		w.query = `WITH n AS (UPDATE sessions SET last_turn = last_turn + 1 WHERE id = ?1 RETURNING last_turn)
			INSERT INTO turns (session_id, number, agent, prompt, checkpoint_before, started_at, request_key)
			SELECT ?1, n.last_turn, ?2, ?3, ?4, ?5, ?6 FROM n
			RETURNING number`
		w.args = []any{t.SessionID, t.Agent, t.Prompt, t.CheckpointBefore, toUnix(s.orNow(t.StartedAt)), nullString(t.RequestKey)}
	} else {
		id := s.turnSeq.Add(1)
		w.what = "start turn " + strconv.FormatInt(id, 10) + " of session " + strconv.Quote(t.SessionID)
		w.query = insertTurnSQL + ` RETURNING number`
		w.args = []any{id, t.SessionID, t.Agent, t.Prompt, t.CheckpointBefore, toUnix(s.orNow(t.StartedAt)), nullString(t.RequestKey)}
	}
	return w, nil
}

// awaitWaited waits for the outcome of a queued write that its caller
// waits for, nudging the writer so that it does not linger. It gives the
// write up (so that it is never written) when an attempt failed because
// the disk is full, when the writer is failing for a full disk on the
// writes queued before it (they would hold it until space returns), or
// when ctx ends, unless the write is in an attempt.
func (s *Store) awaitWaited(ctx context.Context, w *waited) error {
	s.flushes.Add(1)
	defer s.flushes.Add(-1)
	poke(s.nudge)
	ctxDone := ctx.Done()
	poll := time.NewTicker(fullPoll) // s.full has no channel to wait on
	defer poll.Stop()
	for {
		state, err := w.get()
		switch state {
		case waitDone:
			return nil
		case waitRejected:
			return s.mapWriteErr(err)
		case waitDropped:
			return ErrClosed
		case waitPending:
			if isFull(err) && w.abandon() {
				return s.fullErr(err)
			}
			if s.full.Load() && w.abandon() {
				return s.waitingFull()
			}
			if ctx.Err() != nil && w.abandon() {
				return context.Cause(ctx)
			}
		}
		select {
		case <-w.changed:
		case <-poll.C:
		case <-ctxDone:
			ctxDone = nil // from now on, wait only for the attempt to end
		}
	}
}

// EndTurn queues how turn number of sessionID ended, stamped end.EndedAt
// (zero: now), and returns without waiting for the write. An unknown turn
// or one that has already ended is logged and counted in Stats.Rejected,
// and keeps its first end. Events appended after EndTurn are committed
// with or after the end, so an event that reports the end is never seen
// without it.
func (s *Store) EndTurn(ctx context.Context, sessionID string, number int64, end TurnEnd) error {
	return s.enqueue(s.endTurnWrite(sessionID, number, end))
}

func (s *Store) endTurnWrite(sessionID string, number int64, end TurnEnd) *write {
	return &write{
		what:    "end turn " + strconv.FormatInt(number, 10) + " of session " + strconv.Quote(sessionID),
		session: sessionID,
		query: `UPDATE turns SET stop_reason = ?, error = ?, checkpoint_after = ?, ended_at = ?
			WHERE session_id = ? AND number = ? AND ended_at IS NULL`,
		args:   []any{end.StopReason, end.Error, end.CheckpointAfter, toUnix(s.orNow(end.EndedAt)), sessionID, number},
		affect: true,
		orphan: "turn unknown or already ended",
	}
}

// EndTurnEvent queues the end of turn number of ev.Session together with
// ev, the event that reports it, to be committed in one transaction: ev is
// stored (and committed called with it, as for AppendNotify) only if the
// turn was still open, so the end is never stored without its event nor
// reported twice. It never waits for room: a full queue takes it all the
// same (see AppendPast). It returns ErrClosed after Close.
func (s *Store) EndTurnEvent(ctx context.Context, number int64, end TurnEnd, ev backends.Event, committed func(backends.Event)) error {
	if ev.Session == "" {
		return fmt.Errorf("end turn %d: event without a session", number)
	}
	w := s.endTurnWrite(ev.Session, number, end)
	// Queued past a full queue: a turn's end must not wait for a disk that
	// stays full, and is written, after the turn's events, once space
	// returns. There is one per turn.
	_, err := s.queue.push(item{w: w, ev: ev, committed: committed}, -1)
	return s.enqueued(w, err)
}

// OpenTurns returns the turns that have not ended, oldest first: at
// startup, those a previous daemon left running. With leasing it sees
// only the sessions this store holds (call it after ClaimOwn).
func (s *Store) OpenTurns(ctx context.Context) ([]Turn, error) {
	scope, args := s.heldScope("session_id")
	var rows []turnRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+turnCols+` FROM turns WHERE ended_at IS NULL`+scope+` ORDER BY id`, args...); err != nil {
		return nil, fmt.Errorf("list open turns: %w", err)
	}
	out := make([]Turn, len(rows))
	for i, r := range rows {
		out[i] = r.turn()
	}
	return out, nil
}

// EndOpenTurns ends every turn still running with stop reason "error" and
// the message errText; it is for the startup sweep, when no turn can still be
// running. It returns the number of turns ended. With leasing it ends
// only the turns of the sessions this store holds.
func (s *Store) EndOpenTurns(ctx context.Context, errText string) (int64, error) {
	if err := s.awaitWrites(ctx); err != nil {
		return 0, fmt.Errorf("end open turns: %w", err)
	}
	scope, args := s.heldScope("session_id")
	res, err := s.db.ExecContext(ctx, `UPDATE turns SET stop_reason = 'error', error = ?, ended_at = ?
		WHERE ended_at IS NULL`+scope, append([]any{errText, toUnix(s.now())}, args...)...)
	if err != nil {
		return 0, fmt.Errorf("end open turns: %w", s.mapWriteErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("end open turns: %w", err)
	}
	return n, nil
}

// GetTurn returns turn number of sessionID, or ErrNotFound.
func (s *Store) GetTurn(ctx context.Context, sessionID string, number int64) (Turn, error) {
	if err := s.awaitWrites(ctx); err != nil {
		return Turn{}, fmt.Errorf("get turn %d of session %q: %w", number, sessionID, err)
	}
	var row turnRow
	err := s.db.GetContext(ctx, &row, `SELECT `+turnCols+` FROM turns WHERE session_id = ? AND number = ?`,
		sessionID, number)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Turn{}, fmt.Errorf("get turn %d of session %q: %w", number, sessionID, err)
	}
	return row.turn(), nil
}

// TurnByKey returns the turn of sessionID that a prompt carrying key
// started (see Turn.RequestKey), as committed: unlike GetTurn it does not
// wait for the writes queued before it (every keyed prompt asks, and must
// not wait behind other sessions' events), so a turn whose StartTurn has
// not returned yet is not found, and a turn found may have ended since.
// It returns ErrNotFound when there is none.
func (s *Store) TurnByKey(ctx context.Context, sessionID, key string) (Turn, error) {
	var row turnRow
	err := s.db.GetContext(ctx, &row, `SELECT `+turnCols+` FROM turns WHERE session_id = ? AND request_key = ?`,
		sessionID, key)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Turn{}, fmt.Errorf("turn of session %q with key %q: %w", sessionID, key, err)
	}
	return row.turn(), nil
}

// TurnKeys returns the number of each turn of sessionID that a prompt
// carrying a key started, by key, as committed (like TurnByKey, it does
// not wait for queued writes).
func (s *Store) TurnKeys(ctx context.Context, sessionID string) (map[string]int64, error) {
	var rows []struct {
		Key    string `db:"request_key"`
		Number int64  `db:"number"`
	}
	if err := s.db.SelectContext(ctx, &rows, `SELECT request_key, number FROM turns WHERE session_id = ? AND request_key IS NOT NULL`,
		sessionID); err != nil {
		return nil, fmt.Errorf("turn keys of session %q: %w", sessionID, err)
	}
	keys := make(map[string]int64, len(rows))
	for _, r := range rows {
		keys[r.Key] = r.Number
	}
	return keys, nil
}

// ListTurns returns the turns of sessionID in the order they started
// (by number).
func (s *Store) ListTurns(ctx context.Context, sessionID string) ([]Turn, error) {
	if err := s.awaitWrites(ctx); err != nil {
		return nil, fmt.Errorf("list turns of session %q: %w", sessionID, err)
	}
	var rows []turnRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+turnCols+` FROM turns WHERE session_id = ? ORDER BY number`,
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
	err := s.db.GetContext(ctx, &row, `SELECT `+turnCols+` FROM turns WHERE session_id = ? ORDER BY number DESC LIMIT 1`,
		sessionID)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Turn{}, fmt.Errorf("last turn of session %q: %w", sessionID, err)
	}
	return row.turn(), nil
}

// nullString is s, or NULL when it is empty.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
