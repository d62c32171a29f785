package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/worktree"
)

// Worktrees adapts *worktree.Manager to pool.Worktrees. For a session
// whose repository is given by URL, it pushes the session's branch and
// checkpoint ref to the remote after each checkpoint and after Remove
// (see pushAfter), and Merge pushes the session branch with the merge.
type Worktrees struct {
	M *worktree.Manager
	// Logger receives what could not be pushed (nil: slog.Default()).
	Logger *slog.Logger
	// Ledger, when several hosts share the store, keeps what was last
	// pushed of each session under the owner's lease: pushes expect it on
	// the remote (so a host that lost the session cannot overwrite what
	// the new owner pushed), and a host continuing a session starts from
	// it. Nil: the mirror's own record (worktree.Manager.LastPushed).
	Ledger PushLedger
	// Pushes, when set, runs the pushes after checkpoints in the
	// background (a turn's end does not wait for them); a close, a
	// move and a merge wait for the session's push first. Nil: pushes
	// are made before Checkpoint returns.
	Pushes *Pushes
}

// PushLedger records what was pushed of sessions (the store's
// RecordPushed, fenced by the lease).
type PushLedger interface {
	// Host is this host's id.
	Host() string
	// PushedHeld is what was last pushed of session, with the epoch of
	// the lease this host holds; an error when it does not hold it.
	PushedHeld(ctx context.Context, session string) (branch, checkpoint string, epoch int64, err error)
	// RecordPushed records what was pushed of session: its branch and
	// checkpoint (commits) and the checkpoint's tree.
	RecordPushed(ctx context.Context, session, branch, checkpoint, tree string) error
}

var (
	_ pool.Worktrees = Worktrees{}
	_ pool.Mover     = Worktrees{}
)

// Movable says whether a session of repo can continue on another host.
func (a Worktrees) Movable(ctx context.Context, repo string) bool {
	return a.M.Mirrored(ctx, repo)
}

// Handoff checkpoints wt and pushes it, failing when the push does.
func (a Worktrees) Handoff(ctx context.Context, wt pool.Worktree) error {
	if err := a.Pushes.Wait(ctx, wt.Session); err != nil {
		return err
	}
	if _, err := a.M.Checkpoint(ctx, toWT(wt)); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return a.push(ctx, wt)
}

// Continue makes on this host the worktree of a session another host
// pushed, from the checkpoint the ledger recorded. A stale copy of the
// session's worktree left here (this host lost the session earlier) is
// removed first.
//
// With a ledger, this host first moves the session's fence on the remote
// to its lease (worktree.Manager.ClaimFence): from then on the previous
// owner's pushes are refused there, and what the remote holds is the
// session's last state, which the worktree is made from (a push of the
// previous owner that landed but that the store refused to record is
// part of it).
func (a Worktrees) Continue(ctx context.Context, wt pool.Worktree) (pool.Worktree, error) {
	opts := worktree.ContinueOptions{Branch: wt.Branch, BaseCommit: wt.BaseCommit}
	if a.Ledger != nil {
		if err := a.claim(ctx, wt.Session, wt.Repo, wt.Branch); err != nil {
			return pool.Worktree{}, err
		}
	}
	w, pushed, err := a.M.Continue(ctx, wt.Session, wt.Repo, opts)
	if errors.Is(err, worktree.ErrExists) {
		if aerr := a.M.Abandon(ctx, wt.Session, wt.Repo); aerr != nil {
			return pool.Worktree{}, fmt.Errorf("%w (and the stale copy here could not be removed: %w)", err, aerr)
		}
		w, pushed, err = a.M.Continue(ctx, wt.Session, wt.Repo, opts)
	}
	if err != nil {
		return pool.Worktree{}, err
	}
	if a.Ledger != nil {
		if err := a.Ledger.RecordPushed(ctx, wt.Session, pushed.Branch, pushed.Checkpoint, a.treeOf(ctx, wt.Repo, pushed.Checkpoint)); err != nil {
			a.logger().Warn("record what the session continued from", "session", wt.Session, "err", err)
		}
	}
	out := fromWT(w)
	out.CreatedAt = wt.CreatedAt
	return out, nil
}

// claim moves the remote's fence of session to the lease this host holds
// (see worktree.Manager.ClaimFence).
func (a Worktrees) claim(ctx context.Context, session, repo, branch string) error {
	_, _, epoch, err := a.Ledger.PushedHeld(ctx, session)
	if err != nil {
		return fmt.Errorf("the lease of the session: %w", err)
	}
	if _, err := a.M.ClaimFence(ctx, session, repo, branch, worktree.Fence{Host: a.Ledger.Host(), Epoch: epoch}); err != nil {
		return fmt.Errorf("fence the session on its remote: %w", err)
	}
	return nil
}

// ClaimFence moves the fence of session, a session of repo (given by URL)
// on branch, on the remote to the lease this host now holds: the cluster
// calls it at each take-over, so that the previous owner's pushes are
// refused from then on, whether or not this host ever loads the session.
// A session of a local repository has no fence.
func (a Worktrees) ClaimFence(ctx context.Context, session, repo, branch string) error {
	if a.Ledger == nil || !a.M.Mirrored(ctx, repo) {
		return nil
	}
	return a.claim(ctx, session, repo, branch)
}

// treeOf is the tree of the checkpoint commit in the mirror of repo, ""
// for none or when it cannot be read.
func (a Worktrees) treeOf(ctx context.Context, repo, checkpoint string) string {
	if checkpoint == "" {
		return ""
	}
	tree, err := a.M.TreeOf(ctx, repo, checkpoint)
	if err != nil {
		a.logger().Warn("read the tree of a pushed checkpoint", "repo", repo, "commit", checkpoint, "err", err)
	}
	return tree
}

func (a Worktrees) logger() *slog.Logger {
	if a.Logger == nil {
		return slog.Default()
	}
	return a.Logger
}

func toWT(w pool.Worktree) worktree.Worktree {
	return worktree.Worktree{Session: w.Session, Repo: w.Repo, Path: w.Path, Branch: w.Branch, BaseCommit: w.BaseCommit, CreatedAt: w.CreatedAt, Agent: w.Agent}
}

func fromWT(w worktree.Worktree) pool.Worktree {
	return pool.Worktree{Session: w.Session, Repo: w.Repo, Path: w.Path, Branch: w.Branch, BaseCommit: w.BaseCommit, CreatedAt: w.CreatedAt}
}

// invalid marks caller mistakes (bad repo, ref or id) as pool.ErrInvalid.
func invalid(err error) error {
	for _, e := range []error{worktree.ErrNotRepository, worktree.ErrBareRepository, worktree.ErrUnknownRef, worktree.ErrInvalidSession, worktree.ErrExists, worktree.ErrSetupConfig,
		worktree.ErrInvalidURL} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", pool.ErrInvalid, err)
		}
	}
	return err
}

// Create makes a session's worktree.
func (a Worktrees) Create(ctx context.Context, session, repo, baseRef string) (pool.Worktree, error) {
	w, err := a.M.Create(ctx, session, repo, baseRef)
	return fromWT(w), invalid(err)
}

// Recreate re-creates a missing worktree from its branch.
func (a Worktrees) Recreate(ctx context.Context, wt pool.Worktree) (pool.Worktree, error) {
	w, err := a.M.Recreate(ctx, toWT(wt))
	return fromWT(w), err
}

// Remove removes a worktree, preserving its work unless discard.
func (a Worktrees) Remove(ctx context.Context, wt pool.Worktree, discard bool) (pool.RemoveResult, error) {
	if err := a.Pushes.Wait(ctx, wt.Session); err != nil {
		return pool.RemoveResult{}, err
	}
	r, err := a.M.Remove(ctx, toWT(wt), discard)
	out := pool.RemoveResult{Branch: r.Branch, Committed: r.Committed, Commit: r.Commit, Discarded: r.Discarded, Missing: r.Missing,
		BranchDeleted: r.BranchDeleted}
	if err == nil && !r.BranchDeleted && !discard && a.M.Mirrored(ctx, wt.Repo) {
		// The close says where the work is once it is there: it waits
		// for the push, and says so when the push failed.
		if perr := a.push(ctx, wt); perr != nil {
			a.logger().Warn("session not pushed to its repository", "session", wt.Session, "after", "close",
				"remote_moved", errors.Is(perr, worktree.ErrRemoteMoved), "err", perr)
			out.PushError = perr.Error()
			if a.Ledger != nil {
				out.Host = a.Ledger.Host()
			}
		} else {
			out.Remote = wt.Repo
		}
	}
	return out, err
}

// Prune deletes a removed worktree's checkpoints and its branch as asked.
func (a Worktrees) Prune(ctx context.Context, wt pool.Worktree, req pool.WorktreePrune) (pool.BranchPrune, error) {
	r, err := a.M.Prune(ctx, toWT(wt), worktree.PruneOptions{Branch: req.Branch, DryRun: req.DryRun})
	return pool.BranchPrune{Name: r.Branch, Head: r.Head, Commits: r.Commits, Deleted: r.BranchDeleted, Kept: r.BranchKept,
		Merged: r.Merged, CheckpointsDeleted: r.CheckpointsDeleted, RepoMissing: r.RepoMissing}, err
}

var _ pool.HistoryImporter = Worktrees{}

// ImportHistory brings the agent's own commits onto the session branch
// when its private ref moved (worktree.Manager.ImportChanged).
func (a Worktrees) ImportHistory(ctx context.Context, wt pool.Worktree) (pool.HistoryImport, error) {
	r, err := a.M.ImportChanged(ctx, toWT(wt))
	return pool.HistoryImport{Commits: r.Commits, Refused: r.Refused, Detail: r.Detail}, err
}

// Checkpoint records the worktree state.
func (a Worktrees) Checkpoint(ctx context.Context, wt pool.Worktree) (string, error) {
	tree, err := a.M.Checkpoint(ctx, toWT(wt))
	if err == nil && a.Pushes != nil && a.M.Mirrored(ctx, wt.Repo) {
		// In the background: the turn's end does not wait for it.
		pctx := context.WithoutCancel(ctx)
		a.Pushes.start(wt.Session, func() { a.pushAfter(pctx, wt, "checkpoint") })
	} else if err == nil {
		a.pushAfter(ctx, wt, "checkpoint")
	}
	return tree, err
}

// pushTimeout bounds a push after a checkpoint: a remote that does not
// answer delays a turn by at most this much.
const pushTimeout = time.Minute

// pushAfter pushes the session's branch and checkpoint ref to the remote
// of a repository given by URL, expecting there what this host last
// pushed (worktree.Manager.LastPushed; a cluster's lease layer will pass
// the values its store recorded under the owner's epoch). A failure is
// logged, not returned: the checkpoint is taken either way, and a push
// refused because the remote moved (the session continued elsewhere)
// says so.
func (a Worktrees) pushAfter(ctx context.Context, wt pool.Worktree, after string) {
	if !a.M.Mirrored(ctx, wt.Repo) {
		return
	}
	if err := a.push(ctx, wt); err != nil {
		a.logger().Warn("session not pushed to its repository", "session", wt.Session, "after", after,
			"remote_moved", errors.Is(err, worktree.ErrRemoteMoved), "err", err)
	}
}

// push pushes the session's branch and checkpoint ref, expecting on the
// remote what the ledger (or this host's mirror) says was last pushed,
// and records what it pushed.
func (a Worktrees) push(ctx context.Context, wt pool.Worktree) error {
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	w := toWT(wt)
	lease, err := a.lastPushed(ctx, w)
	if err != nil {
		return err
	}
	pushed, err := a.M.Push(ctx, w, lease)
	if errors.Is(err, worktree.ErrRemoteMoved) && a.Ledger != nil {
		// The ledger may be behind the remote: a push landed whose
		// record failed. What this host's mirror recorded of its own
		// pushes is then what the remote holds; the fence still refuses
		// the push if another host holds the session.
		if mine, lerr := a.M.LastPushed(ctx, w); lerr == nil && (mine.Branch != lease.Branch || mine.Checkpoint != lease.Checkpoint) && mine.Branch != "" {
			mine.Fence = lease.Fence
			pushed, err = a.M.Push(ctx, w, mine)
		}
	}
	if err != nil {
		return err
	}
	if a.Ledger != nil {
		if err := a.Ledger.RecordPushed(ctx, wt.Session, pushed.Branch, pushed.Checkpoint, a.treeOf(ctx, wt.Repo, pushed.Checkpoint)); err != nil {
			return fmt.Errorf("record the push: %w", err)
		}
	}
	return nil
}

// lastPushed is the lease of the next push of w: with a ledger, what it
// recorded under this host's lease, and that lease as the push's fence on
// the remote (an error when this host no longer holds the session: it
// pushes nothing of it).
func (a Worktrees) lastPushed(ctx context.Context, w worktree.Worktree) (worktree.Lease, error) {
	if a.Ledger == nil {
		return a.M.LastPushed(ctx, w)
	}
	b, c, epoch, err := a.Ledger.PushedHeld(ctx, w.Session)
	if err != nil {
		return worktree.Lease{}, err
	}
	return worktree.Lease{Branch: b, Checkpoint: c, Fence: &worktree.Fence{Host: a.Ledger.Host(), Epoch: epoch}}, nil
}

// Diff compares two states.
func (a Worktrees) Diff(ctx context.Context, wt pool.Worktree, from, to string) (pool.Diff, error) {
	d, err := a.M.Diff(ctx, toWT(wt), from, to)
	if err != nil {
		return pool.Diff{}, err
	}
	out := pool.Diff{From: d.From, To: d.To, Patch: d.Patch, Truncated: d.Truncated, Files: make([]pool.FileChange, 0, len(d.Files)),
		Stat: pool.DiffStat{Files: d.Stat.Files, Additions: d.Stat.Additions, Deletions: d.Stat.Deletions}}
	for _, f := range d.Files {
		out.Files = append(out.Files, pool.FileChange{Path: f.Path, OldPath: f.OldPath, Status: string(f.Status), OldMode: f.OldMode, NewMode: f.NewMode,
			Additions: f.Additions, Deletions: f.Deletions, Binary: f.Binary, Similarity: f.Similarity})
	}
	out.HiddenCount = d.HiddenCount
	for _, h := range d.Hidden {
		out.Hidden = append(out.Hidden, pool.HiddenFile{Path: h.Path, Rule: h.Rule})
	}
	for _, c := range d.Copied {
		out.Copied = append(out.Copied, pool.CopiedFile{Path: c.Path, Present: c.Present})
	}
	return out, nil
}

// Restore puts the worktree back to a checkpoint.
func (a Worktrees) Restore(ctx context.Context, wt pool.Worktree, checkpoint string) error {
	return a.M.Restore(ctx, toWT(wt), checkpoint)
}

// RunSetup runs the worktree's setup, reporting each step as the session
// event setup.<kind>.
func (a Worktrees) RunSetup(ctx context.Context, wt pool.Worktree, report func(pool.SetupEvent)) error {
	_, err := a.M.RunSetup(ctx, toWT(wt), func(ev worktree.SetupEvent) {
		report(pool.SetupEvent{Type: setupTypes[ev.Kind], Data: ev})
	})
	return err
}

// PrepareSetup prepares a worktree's setup again; an untrusted file or a
// setup still running is pool.ErrConflict, none pool.ErrNotFound.
func (a Worktrees) PrepareSetup(ctx context.Context, wt pool.Worktree) error {
	err := a.M.PrepareSetup(ctx, toWT(wt))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, worktree.ErrUntrusted), errors.Is(err, worktree.ErrSetupRunning):
		return conflictError{err}
	case errors.Is(err, worktree.ErrNoSetupFile), errors.Is(err, worktree.ErrMissing):
		return fmt.Errorf("%w: %w", pool.ErrNotFound, err)
	}
	return invalid(err)
}

// setupTypes maps the worktree's setup steps to session event types.
var setupTypes = map[string]backends.EventType{
	worktree.SetupUntrusted: pool.EventSetupUntrusted,
	worktree.SetupCopied:    pool.EventSetupCopied,
	worktree.SetupStarted:   pool.EventSetupStarted,
	worktree.SetupOutput:    pool.EventSetupOutput,
	worktree.SetupEnded:     pool.EventSetupEnded,
}

// Merge merges a session's branch; conflicts, dirty checkouts and
// branches in use are pool.ErrConflict, a base or target that is not a
// local branch pool.ErrInvalid.
func (a Worktrees) Merge(ctx context.Context, wt pool.Worktree, req pool.WorktreeMerge) (pool.MergeResult, error) {
	opts := worktree.MergeOptions{Into: req.Into, Base: req.Base, Squash: req.Squash, Rebase: req.Rebase,
		Title: req.Title, Summary: req.Summary}
	if err := a.Pushes.Wait(ctx, wt.Session); err != nil {
		return pool.MergeResult{}, err
	}
	if a.M.Mirrored(ctx, wt.Repo) {
		// The session branch goes with the merge, expected where this
		// host last pushed it.
		lease, err := a.lastPushed(ctx, toWT(wt))
		if err != nil {
			return pool.MergeResult{}, err
		}
		opts.Lease = &lease
	}
	r, err := a.M.Merge(ctx, toWT(wt), opts)
	if err == nil && opts.Lease != nil && a.Ledger != nil {
		// The merge pushed the session branch: the ledger follows.
		if now, lerr := a.M.LastPushed(ctx, toWT(wt)); lerr == nil {
			if lerr = a.Ledger.RecordPushed(ctx, wt.Session, now.Branch, now.Checkpoint, a.treeOf(ctx, wt.Repo, now.Checkpoint)); lerr != nil {
				a.logger().Warn("record the push of a merge", "session", wt.Session, "err", lerr)
			}
		}
	}
	if err != nil {
		for _, e := range []error{worktree.ErrConflict, worktree.ErrDirty, worktree.ErrBranchInUse, worktree.ErrRemoteMoved} {
			if errors.Is(err, e) {
				return pool.MergeResult{}, conflictError{err}
			}
		}
		if errors.Is(err, worktree.ErrMissing) {
			return pool.MergeResult{}, fmt.Errorf("%w: %w", pool.ErrNotFound, err)
		}
		return pool.MergeResult{}, invalid(err)
	}
	out := pool.MergeResult{Branch: r.Branch, Into: r.Into, Rebase: r.Rebase, Committed: r.Committed, WorkCommit: r.WorkCommit,
		Method: r.Method, Commits: make([]pool.MergeCommit, 0, len(r.Commits)), MoreCommits: r.MoreCommits,
		Updated: r.Updated, Before: r.Before, Head: r.Head, WorkingTree: r.WorkingTree}
	for _, c := range r.Commits {
		out.Commits = append(out.Commits, pool.MergeCommit{ID: c.ID, Subject: c.Subject})
	}
	return out, nil
}

// conflictError is a merge refusal: it is pool.ErrConflict, with the
// worktree's message alone (which already says what conflicts).
type conflictError struct{ err error }

func (e conflictError) Error() string { return e.err.Error() }

// Unwrap returns the worktree's error and pool.ErrConflict.
func (e conflictError) Unwrap() []error { return []error{e.err, pool.ErrConflict} }

// CommitWork commits the work left uncommitted in wt's worktree to its
// branch (see worktree.Manager.CommitWork).
func (a Worktrees) CommitWork(ctx context.Context, wt pool.Worktree, title string) (string, bool, error) {
	return a.M.CommitWork(ctx, toWT(wt), title)
}

var _ pool.Forker = Worktrees{}

// Snap reads a worktree's state for a fork (worktree.Manager.Snap).
func (a Worktrees) Snap(ctx context.Context, wt pool.Worktree) (pool.Snapshot, error) {
	s, err := a.M.Snap(ctx, toWT(wt))
	return pool.Snapshot{Tree: s.Tree, Head: s.Head}, err
}

// StartAt points a spare's worktree at a commit for a fork
// (worktree.Manager.StartAt).
func (a Worktrees) StartAt(ctx context.Context, wt pool.Worktree, commit string) error {
	return a.M.StartAt(ctx, toWT(wt), commit)
}
