package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Append queues ev for the writer and returns at once; ev must carry its
// Session and Seq (the caller assigns seqs, see NextSeq), and a zero Time is
// stamped at write time. Each session's events are written in the order
// Append was called for them.
//
// Append never fails: a write error is logged and the batch retried, in
// order, until it succeeds. When QueueLimit events are already waiting,
// Append blocks up to AppendWait for room and then drops ev; after Close it
// drops ev at once. Drops are counted in Stats.Dropped and logged (the 1st,
// 2nd, 4th, 8th... drop, so that an outage does not flood the log).
func (s *Store) Append(ev backends.Event) { s.AppendNotify(ev, nil) }

// AppendNotify is Append with a commit hook: once the transaction holding
// ev has committed, the writer goroutine calls committed(ev) (when not nil)
// before it writes anything else, so the hooks run one at a time, each
// session's in the order of its Append calls (the writer takes sessions
// round-robin, see queue; a write about no one session is ordered with
// every other), each after its event is durable. The hook is
// never called for an event the database refuses or the store drops. It
// must not block: it runs on the writer's path, which it delays.
func (s *Store) AppendNotify(ev backends.Event, committed func(backends.Event)) {
	_, err := s.queue.push(item{ev: ev, committed: committed}, s.cfg.AppendWait)
	if err == nil {
		return
	}
	n := s.dropped.Add(1)
	s.lost.add(ev)
	if n&(n-1) == 0 {
		s.log.Error("event dropped", logKeySession, ev.Session, logKeySeq, ev.Seq, logKeyDropped, n, logKeyErr, err)
	}
}

// AppendPast is AppendNotify for an event that must be queued even when
// the queue is full, without waiting and without being dropped: an event of
// a turn that is ending (its deadline passed, it was cancelled), whose
// agent must not be held by a disk that stays full. The queue then holds
// more than QueueLimit, by what such turns send until they end. After
// Close it drops ev, as Append does.
func (s *Store) AppendPast(ev backends.Event, committed func(backends.Event)) {
	if _, err := s.queue.push(item{ev: ev, committed: committed}, -1); err != nil {
		n := s.dropped.Add(1)
		s.lost.add(ev)
		s.log.Error("event dropped", logKeySession, ev.Session, logKeySeq, ev.Seq, logKeyDropped, n, logKeyErr, err)
	}
}

// WaitRoom returns once the write queue has room for an event of session,
// so that a caller can apply backpressure before it takes a lock and
// appends (an Append that then finds the queue full again waits only
// AppendWait). A session holding little of the queue finds room while
// others fill it with big events, up to a hard bound, and a session
// holding a quarter of it waits for its own events to be written (see
// queue). It returns ErrClosed after Close and the context's error when
// ctx ends.
func (s *Store) WaitRoom(ctx context.Context, session string) error {
	_, err := s.WaitRoomFor(ctx, session)
	return err
}

// WaitRoomFor is WaitRoom, and says how long it waited for room: 0 when
// there was room at once. The time is counted in the session's
// SessionQueues.
func (s *Store) WaitRoomFor(ctx context.Context, session string) (time.Duration, error) {
	waited, err := s.queue.waitRoom(ctx, session)
	if errors.Is(err, errQueueClosed) {
		return waited, fmt.Errorf("wait for room in the write queue: %w", ErrClosed)
	}
	if err != nil {
		return waited, fmt.Errorf("wait for room in the write queue: %w", err)
	}
	return waited, nil
}

// SessionQueues returns, for each session with writes queued (or being
// written), or whose producers waited for room in the last hour, what it
// has in the write queue and how long its producers waited for room.
func (s *Store) SessionQueues() []SessionQueue { return s.queue.sessionQueues() }

// Flush returns once every event appended (and every write queued) before
// the call has been written (or counted as rejected or dropped, see Stats),
// skipping the writer's FlushInterval wait. It returns the context's error
// if ctx ends first, and ErrClosed if called after Close.
func (s *Store) Flush(ctx context.Context) error {
	select {
	case <-s.quit:
		return fmt.Errorf("flush events: %w", ErrClosed)
	default:
	}
	return s.waitFor(ctx, s.queue.position())
}

// AwaitDelivery returns once delivered is closed, which the caller does in
// the committed callback of a write it queued before (the delivery of an
// event someone waits for: a turn's end, a session's creation), or once
// every write queued before the call has settled (as Flush: the awaited
// one was refused or dropped, and delivered stays open); meanwhile the
// writer does not linger for a fuller batch. Unlike Flush it does not wait
// for the writes queued before when the awaited one is delivered first:
// the writer commits a light session's writes ahead of other sessions'
// megabytes (see queue.takeBatch). It returns ErrClosed when the store closed
// with the writes unsettled, and the context's error if ctx ends first.
func (s *Store) AwaitDelivery(ctx context.Context, delivered <-chan struct{}) error {
	select {
	case <-delivered:
		return nil
	default:
	}
	return s.waitUntil(ctx, s.queue.position(), delivered, "await delivery")
}

// fullPoll is how often flushUnlessFull looks at whether the writer is
// failing for a full disk.
const fullPoll = 50 * time.Millisecond

// flushUnlessFull is Flush, except that it gives up with an error
// wrapping ErrFull, naming the database, while the writer's last attempt
// failed for a full disk: a write that must follow the queued ones (a
// delete) is refused at once rather than held until space returns.
func (s *Store) flushUnlessFull(ctx context.Context) error {
	for {
		if s.full.Load() {
			return s.waitingFull()
		}
		fctx, cancel := context.WithTimeout(ctx, fullPoll)
		err := s.Flush(fctx)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

// waitFor returns once the queued items up to position target have settled.
func (s *Store) waitFor(ctx context.Context, target int64) error {
	return s.waitUntil(ctx, target, nil, "flush events")
}

// waitUntil returns once the queued items up to position target have
// settled or delivered (nil: never) is closed, asking the writer not to
// linger meanwhile. Its errors say what, the caller's step.
func (s *Store) waitUntil(ctx context.Context, target int64, delivered <-chan struct{}, what string) error {
	if ok, _ := s.prog.reached(target); ok {
		return nil
	}
	select {
	case <-s.quit:
		return fmt.Errorf("%s: %w", what, ErrClosed)
	default:
	}
	s.flushes.Add(1)
	defer s.flushes.Add(-1)
	poke(s.nudge)
	for {
		ok, changed := s.prog.reached(target)
		if ok {
			return nil
		}
		select {
		case <-delivered:
			return nil
		case <-changed:
		case <-s.done:
			if ok, _ := s.prog.reached(target); !ok {
				return fmt.Errorf("%s: %w", what, ErrClosed)
			}
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, context.Cause(ctx))
		}
	}
}

// NextSeq returns the seq that follows the last event of sessionID stored
// or queued (1 for none), without waiting for the writer; the caller then
// assigns seqs itself and must not call NextSeq while appending for the
// session. On PostgreSQL, where several stores may append to one session,
// the seq an event is stored under is allocated by the transaction that
// writes it, from the session's counter row: the larger of the event's
// Seq and one past the session's last, so that it is the caller's own
// seq when the caller is the session's only writer, and the next free one
// otherwise (an event with Seq 0 always takes the next one). The commit
// hook gets the event with the seq it was stored under.
func (s *Store) NextSeq(ctx context.Context, sessionID string) (int64, error) {
	// The queue first: an event that leaves it has been written before,
	// so the read below sees it (unless it was refused or dropped).
	queued := s.queue.queuedSeq(sessionID)
	var last int64
	err := s.db.GetContext(ctx, &last, s.eng.lastSeqSQL(), sessionID)
	if err != nil && !errors.Is(err, sql.ErrNoRows) { // no row: no session, no event
		return 0, fmt.Errorf("next seq of session %q: %w", sessionID, err)
	}
	return max(last, queued) + 1, nil
}

type eventRow struct {
	SessionID string `db:"session_id"`
	Seq       int64  `db:"seq"`
	Turn      *int64 `db:"turn"`
	Agent     string `db:"agent"`
	Type      string `db:"type"`
	Data      []byte `db:"data"` // nil: NULL; read once, kept as the event's Data
	CreatedAt int64  `db:"created_at"`
}

// Events returns the written events of sessionID with seq > afterSeq in seq
// order, at most limit of them (limit <= 0: all). Events still queued are
// not included; Flush first to see them.
func (s *Store) Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]backends.Event, error) {
	return s.EventsPage(ctx, sessionID, afterSeq, limit, 0)
}

// EventsPage is Events bounded by bytes too: it stops after the event
// whose Data brings the page to maxBytes or more (maxBytes <= 0: no
// bound), so that a page holds less than maxBytes plus one event. Rows are
// read one at a time, and none past the page.
func (s *Store) EventsPage(ctx context.Context, sessionID string, afterSeq int64, limit int, maxBytes int64) ([]backends.Event, error) {
	var lim any = limit
	if limit <= 0 {
		lim = s.eng.noLimit()
	}
	rows, err := s.db.QueryxContext(ctx, `SELECT session_id, seq, turn, agent, type, data, created_at
		FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`, sessionID, afterSeq, lim)
	if err != nil {
		return nil, fmt.Errorf("events of session %q after %d: %w", sessionID, afterSeq, err)
	}
	defer rows.Close()
	var out []backends.Event
	var held int64
	for rows.Next() {
		var r eventRow
		if err := rows.StructScan(&r); err != nil {
			return nil, fmt.Errorf("events of session %q after %d: %w", sessionID, afterSeq, err)
		}
		ev := backends.Event{
			Seq: r.Seq, Session: r.SessionID, Agent: r.Agent,
			Time: fromUnix(r.CreatedAt), Type: backends.EventType(r.Type),
		}
		if r.Turn != nil {
			ev.Turn = *r.Turn
		}
		if r.Data != nil {
			ev.Data = json.RawMessage(r.Data)
		}
		out = append(out, ev)
		if held += int64(len(r.Data)); maxBytes > 0 && held >= maxBytes {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("events of session %q after %d: %w", sessionID, afterSeq, err)
	}
	if out == nil {
		out = []backends.Event{}
	}
	return out, nil
}

// Stats are the event writer's counters since Open.
type Stats struct {
	// Appended counts events written to the database.
	Appended int64
	// Batches counts the transactions that committed events.
	Batches int64
	// Retries counts failed batch attempts that were tried again.
	Retries int64
	// Dropped counts events lost: queue full, Append after Close, or still
	// failing when Close gave up.
	Dropped int64
	// Rejected counts events and queued writes the database refused for
	// themselves (duplicate seq, unknown session, a turn already ended).
	Rejected int64
	// Pending counts events and writes queued and not yet settled.
	Pending int64
}

// Stats returns the writer's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Appended: s.appended.Load(),
		Batches:  s.batches.Load(),
		Retries:  s.retries.Load(),
		Dropped:  s.dropped.Load(),
		Rejected: s.rejected.Load(),
		Pending:  s.queue.position() - s.prog.done(),
	}
}

// EventsOfTypes returns the written events of sessionID whose type is one
// of types, in seq order. Events still queued are not included; Flush
// first to see them. Rows of other types are skipped without reading
// their data, so that a summary of a long session (see the pool's
// briefing) reads only what it uses.
func (s *Store) EventsOfTypes(ctx context.Context, sessionID string, types []string) ([]backends.Event, error) {
	if len(types) == 0 {
		return []backends.Event{}, nil
	}
	args := make([]any, 0, len(types)+1)
	args = append(args, sessionID)
	marks := make([]string, len(types))
	for i, t := range types {
		marks[i] = "?"
		args = append(args, t)
	}
	rows, err := s.db.QueryxContext(ctx, `SELECT session_id, seq, turn, agent, type, data, created_at
		FROM events WHERE session_id = ? AND type IN (`+strings.Join(marks, ", ")+`) ORDER BY seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("events of session %q by type: %w", sessionID, err)
	}
	defer rows.Close()
	out := []backends.Event{}
	for rows.Next() {
		var r eventRow
		if err := rows.StructScan(&r); err != nil {
			return nil, fmt.Errorf("events of session %q by type: %w", sessionID, err)
		}
		ev := backends.Event{Seq: r.Seq, Session: r.SessionID, Agent: r.Agent, Time: fromUnix(r.CreatedAt), Type: backends.EventType(r.Type)}
		if r.Turn != nil {
			ev.Turn = *r.Turn
		}
		if r.Data != nil {
			ev.Data = json.RawMessage(r.Data)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("events of session %q by type: %w", sessionID, err)
	}
	return out, nil
}
