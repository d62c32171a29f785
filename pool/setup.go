package pool

import "github.com/agentpool/agentpool/backends"

// Session events of a worktree's setup, from the repository's
// .agentpool.json (see Worktrees.RunSetup). A setup that ran anything ends
// with EventSetupEnded, whose data says whether it succeeded: a failure is
// reported there, never silent.
const (
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
