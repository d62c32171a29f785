package pool

import (
	"context"
	"fmt"
)

// workCommitter is what CommitWork needs of the worktrees, beyond
// Worktrees; a manager without it cannot commit a session's work.
type workCommitter interface {
	CommitWork(ctx context.Context, wt Worktree, title string) (tip string, committed bool, err error)
}

// CommitResult is what CommitWork did.
type CommitResult struct {
	// Branch is the session's branch; Head its tip afterwards.
	Branch string `json:"branch"`
	Head   string `json:"head"`
	// Committed says a commit of the uncommitted work was made.
	Committed bool `json:"committed"`
}

// CommitWork commits the work left uncommitted in the worktree of open
// session id to its branch, with the daemon's hardened git (never the
// worktree's own configuration, which its agent can write), so that the
// branch holds it (for a push, say). A session running a turn is refused.
func (p *Pool) CommitWork(ctx context.Context, id string) (CommitResult, error) {
	wc, ok := p.cfg.Worktrees.(workCommitter)
	if !ok {
		return CommitResult{}, fmt.Errorf("commit the work of session %q: %w", id, ErrInvalid)
	}
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return CommitResult{}, err
	}
	busy, turn, closed, wt, rec := s.state()
	switch {
	case busy:
		return CommitResult{}, fmt.Errorf("session %q is running turn %d; commit its work when the turn has ended: %w", id, turn, ErrBusy)
	case closed:
		return CommitResult{}, fmt.Errorf("session %q: its work was committed when it closed: %w", id, ErrClosed)
	case wt.Path == "":
		return CommitResult{}, fmt.Errorf("session %q has no worktree: %w", id, ErrNotFound)
	}
	title := rec.Title
	if title == "" {
		title = "Work of agentpool session " + id
	}
	tip, committed, err := wc.CommitWork(ctx, wt, title)
	if err != nil {
		return CommitResult{}, err
	}
	return CommitResult{Branch: wt.Branch, Head: tip, Committed: committed}, nil
}
