package attempts

import (
	"context"
	"fmt"
	"time"

	"github.com/agentpool/agentpool/backends"

	"github.com/agentpool/agentpool/pool"
)

// run prompts attempt i of set id, waits for its turn, counts its changes
// and runs the check.
func (m *Manager) run(id string, i int) {
	ctx := m.ctx
	s, err := m.Get(id)
	if err != nil {
		return
	}
	a := s.Attempts[i]
	fail := func(err error) {
		if ctx.Err() != nil {
			// The daemon is stopping: the next one says interrupted.
			return
		}
		m.update(id, func(s *Set) {
			s.Attempts[i].State = AttemptFailed
			s.Attempts[i].Error = err.Error()
			if c := s.Attempts[i].Check; c != nil && c.State == CheckPending {
				c.State = CheckNone
			}
		})
	}
	turn, err := m.cfg.Pool.StartPrompt(ctx, pool.PromptRequest{Session: a.Session, Text: s.Prompt})
	if err != nil {
		fail(fmt.Errorf("prompt: %w", err))
		return
	}
	m.update(id, func(s *Set) { s.Attempts[i].State = AttemptRunning; s.Attempts[i].Turn = turn.ID })
	turn, err = m.cfg.Pool.WaitTurn(ctx, a.Session, turn.ID)
	if err != nil {
		fail(fmt.Errorf("wait for the turn: %w", err))
		return
	}
	diff, derr := m.cfg.Pool.Diff(ctx, a.Session, 0)
	m.update(id, func(s *Set) {
		at := &s.Attempts[i]
		at.StopReason = turn.StopReason
		if turn.Usage != nil {
			at.Usage = backends.MustJSON(turn.Usage)
		}
		if turn.EndedAt != nil {
			at.DurationMS = turn.EndedAt.Sub(turn.StartedAt).Milliseconds()
		}
		if derr == nil {
			at.FilesChanged, at.LinesAdded, at.LinesRemoved = diff.Stat.Files, diff.Stat.Additions, diff.Stat.Deletions
		}
		if turn.Error != "" {
			at.Error = turn.Error
		}
		if at.Check != nil && turn.Error == "" {
			at.State = AttemptChecking
			at.Check.State = CheckRunning
		}
	})
	if turn.Error != "" {
		fail(fmt.Errorf("turn: %s", turn.Error))
		return
	}
	if s.Check != "" {
		m.check(ctx, id, i, s.Check, a.Session)
	}
	if ctx.Err() != nil {
		// The daemon is stopping: the next one says interrupted.
		return
	}
	m.update(id, func(s *Set) { s.Attempts[i].State = AttemptDone })
}

// check runs the set's check command in the worktree of session.
func (m *Manager) check(ctx context.Context, id string, i int, command, session string) {
	sess, err := m.cfg.Pool.Get(ctx, session)
	var out CheckOutcome
	if err != nil {
		out = CheckOutcome{ExitCode: -1, Error: fmt.Sprintf("find the worktree: %v", err)}
	} else {
		start := time.Now()
		out = m.cfg.Git.RunCheck(ctx, sess.Worktree, command, m.cfg.CheckTimeout)
		m.log.Info("attempt check", "set", id, "session", session, "exit", out.ExitCode, "elapsed", time.Since(start))
	}
	if ctx.Err() != nil {
		return
	}
	m.update(id, func(s *Set) {
		c := s.Attempts[i].Check
		c.ExitCode, c.Output, c.Confined = out.ExitCode, out.Output, out.Confined
		if out.Error != "" {
			c.Output = out.Error + "\n" + c.Output
		}
		c.State = CheckFailed
		if out.ExitCode == 0 && out.Error == "" {
			c.State = CheckPassed
		}
	})
}
