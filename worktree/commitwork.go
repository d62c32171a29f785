package worktree

import (
	"context"
	"fmt"
	"path/filepath"
)

// CommitWork commits the work left uncommitted in wt's worktree (tracked
// and untracked files, .gitignore respected, never the files its setup
// copied in) to the session's branch, as Merge and Remove do before they
// move it, authored as the user, with title and the session's trailers.
// It runs the Manager's hardened git, never the worktree's configuration
// (which the agent can write), and resets the worktree's index to the new
// tip so that the agent's git sees no change it did not make. It returns
// the branch's tip and whether a commit was made.
func (m *Manager) CommitWork(ctx context.Context, wt Worktree, title string) (tip string, committed bool, err error) {
	if err := ValidSession(wt.Session); err != nil {
		return "", false, err
	}
	if !filepath.IsAbs(wt.Path) {
		return "", false, fmt.Errorf("commit work: worktree path %q is not absolute", wt.Path)
	}
	if err := m.WaitSetup(ctx, wt); err != nil {
		return "", false, err
	}
	info, st, l, unlock, err := m.lockWorktree(ctx, wt)
	if err != nil {
		return "", false, fmt.Errorf("commit the work of session %q: %w", wt.Session, err)
	}
	defer unlock()
	if _, err := m.importLocked(ctx, info, wt, st, true); err != nil {
		m.log.Warn("commit work: import the agent's commits", keySession, wt.Session, keyErr, err)
	}
	tree, err := m.snapshot(ctx, l)
	if err != nil {
		return "", false, fmt.Errorf("commit the work of session %q: %w", wt.Session, err)
	}
	head, err := m.headOf(ctx, l)
	if err != nil {
		return "", false, fmt.Errorf("commit the work of session %q: %w", wt.Session, err)
	}
	branch := branchOf(wt)
	repo := at(info.top)
	j, err := m.planJoin(ctx, repo, branch, tree, head, []string{title, trailers(wt)})
	if err != nil {
		return "", false, fmt.Errorf("commit the work of session %q: %w", wt.Session, err)
	}
	if err := m.applyJoin(ctx, repo, j, "agentpool: commit the work of session "+wt.Session); err != nil {
		return "", false, fmt.Errorf("commit the work of session %q: %w", wt.Session, err)
	}
	m.exportLocked(ctx, info, wt, st, j.old)
	if j.committed {
		if h, _ := readGitFile(filepath.Join(l.admin, "HEAD")); h == "ref: refs/heads/"+branch {
			if _, err := m.git(ctx, l, "read-tree", "--reset", j.tip); err != nil {
				m.log.Warn("commit work: reset the worktree's index", keyPath, l.dir, keyErr, err)
			}
		}
		m.log.Info("session work committed", keySession, wt.Session, keyBranch, branch, keyCommit, j.tip)
	}
	return j.tip, j.committed, nil
}
