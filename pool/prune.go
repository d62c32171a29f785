package pool

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PruneRequest says which closed sessions Prune forgets and what it may
// delete of their branches.
type PruneRequest struct {
	// OlderThan selects the sessions closed at least this long ago; 0
	// selects every closed session.
	OlderThan time.Duration
	// Branches deletes the branches of the pruned sessions that hold
	// commits too (an empty branch is always deleted).
	Branches bool
	// DryRun reports what Prune would do and changes nothing.
	DryRun bool
}

// WorktreePrune is what Worktrees.Prune may delete.
type WorktreePrune struct {
	// Branch deletes the branch even when it has commits beyond its base.
	Branch bool
	// DryRun deletes nothing.
	DryRun bool
}

// BranchPrune says what pruning a session did to its branch and
// checkpoints.
type BranchPrune struct {
	// Name is the session's branch.
	Name string `json:"name"`
	// Head is the branch's tip when it was found ("" if there was none):
	// after Deleted, `git branch NAME HEAD` brings it back.
	Head string `json:"head,omitempty"`
	// Commits counts the branch's commits beyond the session's base.
	Commits int `json:"commits"`
	// Deleted is true when the branch was (with a dry run, would be)
	// deleted.
	Deleted bool `json:"deleted"`
	// Kept says why a branch that exists was kept.
	Kept string `json:"kept,omitempty"`
	// Merged is true when the branch was where `session merge` left it:
	// its work is in the branch it was merged into, so it was deleted.
	Merged bool `json:"merged,omitempty"`
	// CheckpointsDeleted is true when the checkpoint chain was deleted.
	CheckpointsDeleted bool `json:"checkpoints_deleted"`
	// RepoMissing is true when the repository is gone.
	RepoMissing bool `json:"repo_missing,omitempty"`
}

// PrunedSession is one closed session that Prune looked at.
type PrunedSession struct {
	Session  string    `json:"session"`
	Title    string    `json:"title,omitempty"`
	Repo     string    `json:"repo"`
	ClosedAt time.Time `json:"closed_at"`
	// Pruned is true when the session was (with a dry run, would be)
	// deleted; Error says why not.
	Pruned bool        `json:"pruned"`
	Error  string      `json:"error,omitempty"`
	Branch BranchPrune `json:"branch"`
}

// PruneResult says what Prune did.
type PruneResult struct {
	DryRun bool `json:"dry_run"`
	// ClosedBefore is the cut-off: sessions closed at or before it were
	// selected.
	ClosedBefore time.Time `json:"closed_before"`
	// Sessions are the selected sessions, oldest first.
	Sessions []PrunedSession `json:"sessions"`
}

// Prune forgets the sessions closed at least req.OlderThan ago: for each,
// their checkpoints and their empty branch are deleted from the
// repository (with req.Branches, the branch whatever it holds; a branch
// checked out somewhere is always kept), then the session and everything
// stored about it (turns, events, permission records) from the database.
// Sessions are handled one by one: one that fails is reported with its
// error, left as it is, and the others go on. A session still finishing
// its Close is left for a later Prune. A full disk stops it: the error,
// wrapping ErrStorageFull, says how many sessions were pruned before (the
// rest are left for a later Prune). Otherwise only a failure to list the
// sessions is returned as an error.
func (p *Pool) Prune(ctx context.Context, req PruneRequest) (PruneResult, error) {
	if req.OlderThan < 0 {
		return PruneResult{}, fmt.Errorf("%w: older than %v is negative", ErrInvalid, req.OlderThan)
	}
	recs, err := p.cfg.Store.ListSessions(ctx)
	if err != nil {
		return PruneResult{}, fmt.Errorf("prune: list sessions: %w", err)
	}
	res := PruneResult{DryRun: req.DryRun, ClosedBefore: p.cfg.Now().Add(-req.OlderThan), Sessions: []PrunedSession{}}
	for _, r := range recs {
		if r.Status != StatusClosed || r.UpdatedAt.After(res.ClosedBefore) {
			continue
		}
		ps := PrunedSession{Session: r.ID, Title: r.Title, Repo: r.Repo, ClosedAt: r.UpdatedAt}
		if err := p.pruneOne(ctx, r, req, &ps); errors.Is(err, ErrStorageFull) {
			pruned := 0
			for _, done := range res.Sessions {
				if done.Pruned {
					pruned++
				}
			}
			return res, fmt.Errorf("prune session %q (%d pruned before it, the others left): %w", r.ID, pruned, err)
		} else if err != nil {
			ps.Error = err.Error()
			p.logger.Warn("prune session", "session", r.ID, "err", err)
		} else {
			ps.Pruned = true
		}
		res.Sessions = append(res.Sessions, ps)
		if ctx.Err() != nil {
			break
		}
	}
	return res, nil
}

// pruneOne prunes the closed session r: git first, so that a failure
// there leaves the session to be pruned again.
func (p *Pool) pruneOne(ctx context.Context, r SessionRecord, req PruneRequest, ps *PrunedSession) error {
	p.mu.Lock()
	_, live := p.sessions[r.ID]
	p.mu.Unlock()
	if live {
		return fmt.Errorf("session %q is still closing: %w", r.ID, ErrBusy)
	}
	wt, err := p.cfg.Store.GetWorktree(ctx, r.ID)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return err
	default:
		ps.Branch, err = p.cfg.Worktrees.Prune(ctx, wt, WorktreePrune{Branch: req.Branches, DryRun: req.DryRun})
		if err != nil {
			return err
		}
	}
	if req.DryRun {
		return nil
	}
	if err := p.cfg.Store.DeleteClosedSession(ctx, r.ID); err != nil {
		return err
	}
	p.logger.Info("session pruned", "session", r.ID, "branch", ps.Branch.Name, "head", ps.Branch.Head,
		"branch_deleted", ps.Branch.Deleted, "kept", ps.Branch.Kept)
	return nil
}
