package pool

import (
	"context"

	"github.com/agentpool/agentpool/backends"
)

// endTurnAttempts bounds how often endTurn offers a turn's end to a store
// whose write queue stays full.
const endTurnAttempts = 3

// endTurn stores how turn t ended (t.EndedAt, its stop reason, error and
// checkpoint) together with its turn.ended, built from data, in one
// transaction of the store, so that a crash can never leave the end row
// without its event. turn.ended takes its seq and the session becomes free
// (s.turn = nil) in one hold of the session's lock: a client that prompts
// as soon as it reads turn.ended finds the session free, and no event of a
// next turn can take a seq before turn.ended. The event reaches readers
// once committed; delivered, if not nil, is closed then.
//
// It reports whether the end was queued. When the store cannot take it
// (it is closed), the turn is left open in the store, with no event, and
// the next start's Recover ends it; the session is freed all the same.
func (p *Pool) endTurn(s *session, t Turn, data map[string]any, delivered chan struct{}) bool {
	ctx := context.WithoutCancel(p.ctx)
	ev := backends.Event{Type: backends.EventTurnEnded, Agent: t.Agent, Turn: t.ID, Data: backends.MustJSON(data)}
	var err error
	for attempt := 1; ; attempt++ {
		// No wait for room in the store's queue: the end is queued past a
		// full one (a full disk must not keep the turn from ending), and
		// written, after the turn's events, once space returns.
		s.mu.Lock()
		s.seq++
		ev.Seq, ev.Session, ev.Time = s.seq, s.id, p.cfg.Now()
		err = p.cfg.Store.EndTurnEvent(ctx, t, ev, p.deliverTo(s, delivered))
		if err != nil {
			s.seq-- // nothing was queued under this seq, and nothing else took one since
		}
		if err == nil || attempt == endTurnAttempts || p.ctx.Err() != nil {
			s.turn = nil
			s.mu.Unlock()
			break
		}
		s.mu.Unlock()
	}
	if err != nil {
		p.logger.Warn("store turn end; the next start ends the turn", "session", s.id, "turn", t.ID, "err", err)
		return false
	}
	p.published.Add(1)
	return true
}

// turnEnding returns a context that ends when turn tr is ending: cancelled
// (Cancel, shutdown) or past its deadline, when its backend stops the
// agent. Its stop function releases the timer.
func turnEnding(tr *turnRun) (context.Context, context.CancelFunc) {
	if tr.deadline <= 0 {
		return context.WithCancel(tr.ctx)
	}
	return context.WithTimeout(tr.ctx, tr.deadline)
}

// publishTurn publishes ev, an event of a running turn, as publish does,
// waiting for room in the store's queue (backpressure on the agent) until
// ending ends; then the turn is ending and its events are queued past a
// full queue (Store.AppendPast), neither waiting for a disk that stays
// full nor dropped, so that the backend can finish the turn and its
// turn.ended be queued after them. They are stored when space returns.
func (p *Pool) publishTurn(s *session, ev backends.Event, ending context.Context) {
	if ev.Time.IsZero() {
		ev.Time = p.cfg.Now()
	}
	past := p.waitRoom(ending, s, ev.Agent) != nil // fair.go
	if !past {
		p.pace(ending, s, len(ev.Data)) // fair.go
	}
	s.mu.Lock()
	p.appendLocked(s, ev, nil, past)
	s.mu.Unlock()
	p.published.Add(1)
}
