package pool

import (
	"context"
	"fmt"

	"github.com/agentpool/agentpool/backends"
)

// Recover handles what a previous daemon left behind: agent rows still
// active or idle become crashed or closed, and their recorded process
// groups are killed, but only when the recorded pid still has the recorded
// start time (a recycled pid is never signalled). Turns left open are
// ended. Sessions then resume lazily on their next prompt.
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
	n, err := p.cfg.Store.EndOpenTurns(ctx, "the daemon stopped during the turn")
	if err != nil {
		return fmt.Errorf("recover: end open turns: %w", err)
	}
	if len(rows) > 0 || n > 0 {
		p.logger.Info("recovered from the previous daemon", "agents", len(rows), "open_turns", n)
	}
	return nil
}
