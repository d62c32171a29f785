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
// that every turn.started has its end. Turns that an earlier version ended
// without their turn.ended (it committed the end row and the event apart,
// and a crash came between) get theirs now, marked "repaired" and carrying
// the stored end. Sessions then resume lazily on their next prompt.
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
	var errs []error
	repaired, err := p.reportUnreported(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	open, err := p.cfg.Store.OpenTurns(ctx)
	if err != nil {
		return fmt.Errorf("recover: list open turns: %w", err)
	}
	for _, t := range open {
		if err := p.endInterrupted(ctx, t); err != nil {
			p.logger.Warn("end a turn the previous daemon left open", "session", t.Session, "turn", t.ID, "err", err)
			errs = append(errs, err)
		}
	}
	if len(rows) > 0 || len(open) > 0 || repaired > 0 {
		p.logger.Info("recovered from the previous daemon", "agents", len(rows), "open_turns", len(open), "repaired_turn_ends", repaired)
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

// reportUnreported publishes a turn.ended for each ended turn that has
// none, and returns how many it queued. The event says "repaired": true
// and carries the turn's stored end (stop reason, error, checkpoint, and
// ended_at, which is also its time); it takes the next seq of its session.
// The store writes it only if the turn still has no turn.ended, so a
// repair is never stored twice. Each turn is handled on its own.
func (p *Pool) reportUnreported(ctx context.Context) (int, error) {
	turns, err := p.cfg.Store.UnreportedTurnEnds(ctx)
	if err != nil {
		return 0, fmt.Errorf("recover: list turns ended without turn.ended: %w", err)
	}
	var errs []error
	n := 0
	for _, t := range turns {
		if err := p.reportEnd(ctx, t); err != nil {
			p.logger.Warn("publish the missing turn.ended of an ended turn", "session", t.Session, "turn", t.ID, "err", err)
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// reportEnd queues the repaired turn.ended of ended turn t.
func (p *Pool) reportEnd(ctx context.Context, t Turn) error {
	if t.EndedAt == nil {
		return fmt.Errorf("report end of turn %d: the turn has not ended", t.ID)
	}
	s, err := p.loadSession(ctx, t.Session)
	if err != nil {
		return fmt.Errorf("report end of turn %d: %w", t.ID, err)
	}
	end := *t.EndedAt
	data := map[string]any{"turn": t.ID, "agent": t.Agent, "stop_reason": t.StopReason, "checkpoint": t.CheckpointAfter,
		"duration_ms": end.Sub(t.StartedAt).Milliseconds(), "ended_at": end, "repaired": true}
	if t.Error != "" {
		data["error"] = t.Error
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	ev := backends.Event{Seq: s.seq, Session: s.id, Turn: t.ID, Agent: t.Agent, Type: backends.EventTurnEnded,
		Time: end, Data: backends.MustJSON(data)}
	if err := p.cfg.Store.ReportTurnEnd(ctx, ev, p.deliverTo(s, nil)); err != nil {
		s.seq--
		return fmt.Errorf("report end of turn %d: %w", t.ID, err)
	}
	p.published.Add(1)
	return nil
}
