package pool

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentpool/agentpool/backends"
)

// StopInterrupted is the stop reason of a turn that Recover ended: the
// daemon stopped (crashed, was killed, lost power) while it ran.
const StopInterrupted backends.StopReason = "interrupted"

// interruptedReason is the error recorded for a turn Recover ends.
const interruptedReason = "the daemon stopped during the turn"

// Recover handles what a previous daemon left behind: agent rows still
// active or idle become crashed or closed, and their recorded process
// groups are killed, but only when the recorded pid still has the recorded
// start time (a recycled pid is never signalled). Turns left open are
// ended with stop reason StopInterrupted, each with a turn.ended on its
// session's stream (stored with the turn's end, in one transaction), so
// that every turn.started has its end. Sessions then resume lazily on
// their next prompt.
func (p *Pool) Recover(ctx context.Context) error {
	rows, err := p.cfg.Store.MarkStaleAgents(ctx)
	if err != nil {
		return fmt.Errorf("recover: mark stale agents: %w", err)
	}
	for _, r := range rows {
		if r.PID <= 1 || r.PGID <= 1 {
			continue
		}
		ticks, err := backends.ProcStartTicks(r.PID)
		switch {
		case err != nil:
			if backends.GroupAlive(r.PGID) {
				p.logger.Warn("agent leader gone but its group lives; not signalling without proof of identity", "session", r.Session, "agent", r.Agent, "pgid", r.PGID)
			}
		case r.StartTicks != 0 && ticks == r.StartTicks:
			p.logger.Info("killing agent left by the previous daemon", "session", r.Session, "agent", r.Agent, "pgid", r.PGID)
			if err := backends.KillGroup(r.PGID); err != nil {
				p.logger.Warn("kill leftover agent", "pgid", r.PGID, "err", err)
			}
		default:
			p.logger.Info("recorded pid now belongs to another process; left alone", "pid", r.PID)
		}
	}
	open, err := p.cfg.Store.OpenTurns(ctx)
	if err != nil {
		return fmt.Errorf("recover: list open turns: %w", err)
	}
	var errs []error
	for _, t := range open {
		if err := p.endInterrupted(ctx, t); err != nil {
			p.logger.Warn("end a turn the previous daemon left open", "session", t.Session, "turn", t.ID, "err", err)
			errs = append(errs, err)
		}
	}
	if len(rows) > 0 || len(open) > 0 {
		p.logger.Info("recovered from the previous daemon", "agents", len(rows), "open_turns", len(open))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	return nil
}

// endInterrupted ends turn t, which a previous daemon left open, and
// publishes its turn.ended: the end and the event are committed together,
// and the event reaches readers after that.
func (p *Pool) endInterrupted(ctx context.Context, t Turn) error {
	s, err := p.loadSession(ctx, t.Session)
	if err != nil {
		return fmt.Errorf("end turn %d: %w", t.ID, err)
	}
	end := p.cfg.Now()
	t.StopReason, t.Error, t.EndedAt = string(StopInterrupted), interruptedReason, &end
	data := map[string]any{"turn": t.ID, "agent": t.Agent, "stop_reason": t.StopReason, "error": t.Error,
		"reason": interruptedReason, "duration_ms": end.Sub(t.StartedAt).Milliseconds()}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	ev := backends.Event{Seq: s.seq, Session: s.id, Turn: t.ID, Agent: t.Agent, Type: backends.EventTurnEnded,
		Time: end, Data: backends.MustJSON(data)}
	if err := p.cfg.Store.EndTurnEvent(ctx, t, ev, p.deliverTo(s, nil)); err != nil {
		return fmt.Errorf("end turn %d: %w", t.ID, err)
	}
	p.published.Add(1)
	return nil
}
