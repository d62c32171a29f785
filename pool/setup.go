package pool

import (
	"context"
	"fmt"

	"github.com/agentpool/agentpool/backends"
)

// Session events of a worktree's setup, from the repository's
// .agentpool.json (see Worktrees.RunSetup). A setup that ran anything ends
// with EventSetupEnded, whose data says whether it succeeded: a failure is
// reported there, never silent.
const (
	// EventSetupUntrusted reports a setup skipped because the user has not
	// trusted the repository's setup file as it is: its data carries the
	// file, its hash and content, what it would copy and run, and the
	// command that trusts it. Nothing was copied or run.
	EventSetupUntrusted backends.EventType = "setup.untrusted"
	// EventSetupCopied lists the untracked files copied from the main
	// checkout, and those skipped with why.
	EventSetupCopied backends.EventType = "setup.copied"
	// EventSetupStarted gives the setup command and its timeout.
	EventSetupStarted backends.EventType = "setup.started"
	// EventSetupOutput carries lines of the command's output (bounded).
	EventSetupOutput backends.EventType = "setup.output"
	// EventSetupEnded gives ok, the exit code, the error, the elapsed time
	// and the last lines of output.
	EventSetupEnded backends.EventType = "setup.ended"
)

// SetupEvent is one step of a worktree's setup, published on its session
// as an event of type Type with Data as its JSON data.
type SetupEvent struct {
	Type backends.EventType
	Data any
}

// startSetup runs the setup of s's new worktree in the background; its
// steps are published on the session. Prompts wait for it (the worktree
// manager's Checkpoint does); closing the session or shutting the pool
// down stops it.
func (p *Pool) startSetup(s *session) {
	s.mu.Lock()
	wt := s.wt
	s.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		err := p.cfg.Worktrees.RunSetup(p.ctx, wt, func(ev SetupEvent) { p.emit(s, ev.Type, "", ev.Data) })
		if err != nil {
			p.logger.Warn("worktree setup", "session", s.id, "err", err)
		}
	}()
}

// RunSetup runs the repository's setup in the open session id's worktree
// now, from the setup file as it is: after the user trusted it, a session
// whose setup was skipped gets its copy and command. Its steps are
// published on the session as at creation, and prompts wait for it. It
// refuses a session running a turn (ErrBusy) or closed (ErrClosed); the
// worktree manager refuses an untrusted file or a setup still running
// (ErrConflict) and a repository without one (ErrNotFound).
func (p *Pool) RunSetup(ctx context.Context, id string) error {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	busy, closed, wt := s.turn != nil, s.closed, s.wt
	s.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("session %q is closed: %w", id, ErrClosed)
	case busy:
		return fmt.Errorf("session %q is running a turn; run its setup when the turn has ended: %w", id, ErrBusy)
	}
	if err := p.cfg.Worktrees.PrepareSetup(ctx, wt); err != nil {
		return fmt.Errorf("setup of session %q: %w", id, err)
	}
	p.startSetup(s)
	return nil
}
