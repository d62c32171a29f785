package worktree

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// PruneOptions says what Prune deletes besides a session's checkpoints
// and its branch when that holds no work.
type PruneOptions struct {
	// Branch deletes the session branch even when it has commits beyond
	// the session's base commit.
	Branch bool
	// DryRun reports what Prune would delete and deletes nothing.
	DryRun bool
}

// PruneResult says what Prune did to a session's refs (with DryRun, what it
// would do).
type PruneResult struct {
	// Branch is the session branch.
	Branch string `json:"branch"`
	// Head is the branch's tip when Prune found it, "" when there was no
	// branch. After BranchDeleted, `git branch <Branch> <Head>` brings the
	// branch back (until git gc drops the commits).
	Head string `json:"head,omitempty"`
	// Commits counts the commits of the branch that are not in the
	// session's base commit.
	Commits int `json:"commits"`
	// BranchDeleted is true when the branch was deleted.
	BranchDeleted bool `json:"branch_deleted"`
	// BranchKept says why a branch that exists was kept.
	BranchKept string `json:"branch_kept,omitempty"`
	// Merged is true when the branch's head is the one Merge recorded
	// when it last merged the branch (see MergedRefPrefix): its work is
	// in the branch it was merged into, so it is deleted like an empty
	// one.
	Merged bool `json:"merged,omitempty"`
	// CheckpointsDeleted is true when the session's checkpoint chain was
	// deleted (see CheckpointRefPrefix).
	CheckpointsDeleted bool `json:"checkpoints_deleted"`
	// RepoMissing is true when the repository is gone: there was nothing
	// to delete.
	RepoMissing bool `json:"repo_missing,omitempty"`
}

// Reasons a branch is kept, in PruneResult.BranchKept.
const (
	KeptHasCommits  = "has commits beyond its base"
	KeptUnknownBase = "its base commit is unknown"
	keptCheckedOut  = "checked out at "
)

// Prune deletes what git holds of a session whose worktree was removed
// (see Remove) and which is being forgotten: its checkpoint chain, and its
// branch if the branch has no commit beyond wt.BaseCommit, or with
// opts.Branch whatever it holds. A branch checked out in some worktree is
// never deleted. A repository that no longer exists is reported with
// RepoMissing, not as an error. A worktree directory still in place is
// refused: remove it first.
func (m *Manager) Prune(ctx context.Context, wt Worktree, opts PruneOptions) (PruneResult, error) {
	if err := ValidSession(wt.Session); err != nil {
		return PruneResult{}, err
	}
	res := PruneResult{Branch: branchOf(wt)}
	fail := func(err error) (PruneResult, error) {
		return res, fmt.Errorf("prune session %q: %w", wt.Session, err)
	}
	if wt.Path != "" && lexists(wt.Path) {
		return fail(fmt.Errorf("%w: its worktree %s is still there", ErrExists, wt.Path))
	}
	info, err := m.repo(ctx, wt.Repo)
	if errors.Is(err, ErrNotRepository) {
		res.RepoMissing = true
		return res, nil
	}
	if err != nil {
		return fail(err)
	}
	lock := m.repoLock(info.common)
	lock.Lock()
	defer lock.Unlock()
	if wt.Path != "" && !opts.DryRun {
		// A view left behind by a removal that could not delete it: what
		// the agent committed there joins the branch before it is judged.
		st := m.state(wt.Path)
		st.mu.Lock()
		_, err := m.importLocked(ctx, info, wt, st, true)
		st.mu.Unlock()
		if err != nil {
			return fail(err)
		}
	}
	repo := repoAt(info)
	branchRef, cpRef, mergedRef := "refs/heads/"+res.Branch, CheckpointRefPrefix+wt.Session, MergedRefPrefix+wt.Session
	ids, err := m.resolve(ctx, repo, branchRef, cpRef, mergedRef)
	if err != nil {
		return fail(err)
	}
	res.Head = ids[0]
	res.Merged = res.Head != "" && res.Head == ids[2]
	if res.Head != "" {
		del, err := m.pruneBranchPlan(ctx, info, wt, branchRef, opts, &res)
		if err != nil {
			return fail(err)
		}
		if del && !opts.DryRun {
			if _, err := m.git(ctx, repo, "update-ref", "-m", "agentpool: prune session "+wt.Session, "-d", branchRef, res.Head); err != nil {
				return fail(err)
			}
		}
		res.BranchDeleted = del
	}
	if ids[1] != "" {
		if !opts.DryRun {
			if _, err := m.git(ctx, repo, "update-ref", "-d", cpRef, ids[1]); err != nil {
				return fail(err)
			}
		}
		res.CheckpointsDeleted = true
	}
	if ids[2] != "" && !opts.DryRun {
		if _, err := m.git(ctx, repo, "update-ref", "-d", mergedRef, ids[2]); err != nil {
			return fail(err)
		}
	}
	if info.remote.url != "" && !opts.DryRun {
		// What this host recorded of its pushes; the remote keeps its refs.
		if err := m.recordPushed(ctx, info, wt.Session, Pushed{}); err != nil {
			return fail(err)
		}
	}
	if wt.Path != "" && !opts.DryRun {
		m.dropCopied(wt.Path)
		m.dropView(wt.Path)
		m.forget(wt.Path)
	}
	m.log.Info("session pruned", keySession, wt.Session, keyBranch, res.Branch, keyCommit, res.Head,
		"branch_deleted", res.BranchDeleted, "kept", res.BranchKept, "dry_run", opts.DryRun)
	return res, nil
}

// pruneBranchPlan counts the commits of the branch at res.Head beyond the
// base and decides whether Prune deletes it, setting res.Commits and
// res.BranchKept.
func (m *Manager) pruneBranchPlan(ctx context.Context, info repoInfo, wt Worktree, ref string, opts PruneOptions, res *PruneResult) (bool, error) {
	repo := repoAt(info)
	args := []string{"rev-list", "--count", res.Head}
	if wt.BaseCommit != "" {
		if err := validRev(wt.BaseCommit); err != nil {
			return false, err
		}
		args = append(args, "--not", wt.BaseCommit)
	}
	out, err := m.git(ctx, repo, args...)
	if err != nil {
		return false, err
	}
	if res.Commits, err = strconv.Atoi(strings.TrimSpace(out)); err != nil {
		return false, fmt.Errorf("count the commits of %s: %w", ref, err)
	}
	where, err := m.checkedOut(ctx, info, ref)
	switch {
	case err != nil:
		return false, err
	case where != "":
		res.BranchKept = keptCheckedOut + where
	case opts.Branch, res.Merged:
	case wt.BaseCommit == "":
		res.BranchKept = KeptUnknownBase
	case res.Commits > 0:
		res.BranchKept = KeptHasCommits
	}
	return res.BranchKept == "", nil
}

// dropEmptyBranchLocked deletes the session branch of the worktree Remove
// has just removed (keeping its work) when the branch holds no commit
// beyond wt.BaseCommit: nothing was done in the session, as any uncommitted
// work would have been committed to it. A branch checked out elsewhere, or
// without a known base commit, is kept. It sets res.BranchDeleted and
// clears res.Commit when it deletes the branch.
func (m *Manager) dropEmptyBranchLocked(ctx context.Context, info repoInfo, wt Worktree, res *RemoveResult) error {
	if wt.BaseCommit == "" || res.Branch == "" {
		return nil
	}
	if err := validRev(wt.BaseCommit); err != nil {
		return err
	}
	repo := repoAt(info)
	ref := "refs/heads/" + res.Branch
	ids, err := m.resolve(ctx, repo, ref)
	if err != nil || ids[0] == "" {
		return err
	}
	empty, err := m.isAncestor(ctx, repo, ids[0], wt.BaseCommit)
	if err != nil || !empty {
		return err
	}
	if where, err := m.checkedOut(ctx, info, ref); err != nil || where != "" {
		return err
	}
	if _, err := m.git(ctx, repo, "update-ref", "-m", "agentpool: the session left no work", "-d", ref, ids[0]); err != nil {
		return err
	}
	res.BranchDeleted, res.Commit = true, ""
	return nil
}

// checkedOut returns the path of a worktree of the repository that has ref
// checked out, or "".
func (m *Manager) checkedOut(ctx context.Context, info repoInfo, ref string) (string, error) {
	wts, err := m.list(ctx, info.top)
	if err != nil {
		return "", err
	}
	for _, w := range wts {
		if w.Branch == ref {
			return filepath.Clean(w.Path), nil
		}
	}
	return "", nil
}

// repoAt is the location of git commands on the repository's common
// directory alone, without a work tree: for refs and objects.
func repoAt(info repoInfo) wtLoc {
	return wtLoc{dir: info.common, gitDir: info.common, common: info.common}
}
