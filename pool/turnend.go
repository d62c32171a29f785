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
// (its queue stays full, it is closed), the turn is left open in the
// store, with no event, and the next start's Recover ends it; the session
// is freed all the same.
func (p *Pool) endTurn(s *session, t Turn, data map[string]any, delivered chan struct{}) bool {
	ctx := context.WithoutCancel(p.ctx)
	ev := backends.Event{Type: backends.EventTurnEnded, Agent: t.Agent, Turn: t.ID, Data: backends.MustJSON(data)}
	var err error
	for attempt := 1; ; attempt++ {
		if werr := p.cfg.Store.WaitRoom(p.ctx); werr != nil {
			p.logger.Debug("end a turn without waiting for room in the store's queue", "session", s.id, "turn", t.ID, "err", werr)
		}
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
