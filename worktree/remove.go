package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RemoveResult says what Remove did.
type RemoveResult struct {
	// Branch is the session branch.
	Branch string `json:"branch"`
	// Committed is true when uncommitted work was committed to Branch
	// before the worktree was removed.
	Committed bool `json:"committed"`
	// Commit is the tip of Branch after the removal ("" when discarded);
	// with Committed, the commit that holds the preserved work.
	Commit string `json:"commit,omitempty"`
	// Missing is true when the directory was already gone.
	Missing bool `json:"missing,omitempty"`
	// Discarded is true when the branch and the checkpoint chain were
	// deleted.
	Discarded bool `json:"discarded,omitempty"`
	// BranchDeleted is true when, without discard, the branch was deleted
	// because the session left no work: it had no commit beyond the base
	// commit and nothing uncommitted. The checkpoint chain is kept.
	BranchDeleted bool `json:"branch_deleted,omitempty"`
}

// Remove removes the worktree of wt.
//
// Without discard nothing is lost: if the worktree holds changes (tracked
// or untracked, .gitignore respected) they are first committed to the
// session branch with a message saying so; commits made on a detached HEAD
// or another branch are joined to the session branch as well. Then the
// worktree is removed (ignored files, like build outputs, go with it); the
// branch and the checkpoint chain stay for the user to merge or inspect,
// except a branch left with no commit beyond wt.BaseCommit, which holds
// nothing and is deleted (BranchDeleted; one checked out elsewhere is kept).
// If the work cannot be preserved, nothing is removed and the error says
// why.
//
// With discard the worktree is force-removed and the branch and checkpoint
// chain are deleted. A branch checked out elsewhere (say, in the user's main
// checkout) is never deleted: Remove then returns an error after removing
// the worktree.
//
// A worktree whose directory is already gone is unregistered and reported
// with Missing. A directory that is not a worktree of wt.Repo is refused.
// Stop the session's agents first: a file written between the preserving
// commit and the removal would be lost. A setup command still running
// (see RunSetup) is stopped first.
func (m *Manager) Remove(ctx context.Context, wt Worktree, discard bool) (RemoveResult, error) {
	if err := ValidSession(wt.Session); err != nil {
		return RemoveResult{}, err
	}
	if !filepath.IsAbs(wt.Path) {
		return RemoveResult{}, fmt.Errorf("remove worktree: path %q is not absolute", wt.Path)
	}
	// A setup still running would write into the worktree as it goes.
	m.stopSetup(wt.Path, errSetupRemoved)
	info, err := m.repo(ctx, wt.Repo)
	if err != nil {
		return RemoveResult{}, err
	}
	lock := m.repoLock(info.common)
	lock.Lock()
	defer lock.Unlock()
	res, err := m.removeLocked(ctx, info, wt, discard)
	if err != nil || discard {
		return res, err
	}
	if err := m.dropEmptyBranchLocked(ctx, info, wt, &res); err != nil {
		// The worktree is gone and its work kept: an empty branch left
		// behind is no failure.
		m.log.Warn("keep the branch of a session without work", keySession, wt.Session, keyBranch, res.Branch, keyErr, err)
	}
	return res, nil
}

// removeLocked is Remove with the repository lock held.
func (m *Manager) removeLocked(ctx context.Context, info repoInfo, wt Worktree, discard bool) (RemoveResult, error) {
	st := m.state(wt.Path)
	st.mu.Lock()
	defer st.mu.Unlock()
	branch := branchOf(wt)
	res := RemoveResult{Branch: branch}
	fail := func(err error) (RemoveResult, error) {
		return res, fmt.Errorf("remove worktree of session %q: %w", wt.Session, err)
	}

	var l wtLoc
	_, statErr := os.Lstat(wt.Path)
	switch {
	case errors.Is(statErr, os.ErrNotExist):
		res.Missing = true
	case statErr != nil:
		return fail(statErr)
	default:
		// Located from the repository, never from the worktree's .git
		// file: a worktree of another repository is not found and refused.
		admin := ""
		if p := st.paths.Load(); p != nil && p.CommonDir == info.common && lexists(p.AdminDir) {
			admin = p.AdminDir // recorded when the worktree was made or first found
		} else {
			var err error
			if admin, err = findAdmin(info.common, filepath.Clean(wt.Path)); err != nil {
				return fail(err)
			}
		}
		l = worktreeLoc(filepath.Clean(wt.Path), admin, info.common)
		// git worktree remove refuses a worktree whose .git file does not
		// point back at its admin directory; the agent may have changed it.
		if _, err := m.repairLinks(l, wt.Session); err != nil {
			return fail(err)
		}
		if !discard {
			if err := m.anchorSeedLocked(ctx, st, l, wt); err != nil {
				return fail(err)
			}
		}
	}
	if !discard {
		// The agent's commits in its private view join the branch before
		// the view goes; a refused import leaves them to the commit that
		// keeps the worktree's files.
		if _, err := m.importLocked(ctx, info, wt, st, true); err != nil {
			return fail(err)
		}
	}
	wts, err := m.list(ctx, info.top)
	if err != nil {
		return fail(err)
	}
	var registered *gitWorktree
	for i := range wts {
		if filepath.Clean(wts[i].Path) == filepath.Clean(wt.Path) {
			registered = &wts[i]
		}
	}

	if !discard {
		switch {
		case !res.Missing:
			tree, err := m.snapshot(ctx, l)
			if err != nil {
				return fail(err)
			}
			res.Commit, res.Committed, err = m.keep(ctx, l, wt, branch, tree)
			if err != nil {
				return fail(err)
			}
		case registered != nil && registered.Detached && registered.Head != "":
			// The directory is gone but its detached HEAD may hold commits
			// no branch has: join them to the session branch.
			res.Commit, _, err = m.joinLocked(ctx, at(info.top), wt, branch, "", registered.Head)
			if err != nil {
				return fail(err)
			}
		default:
			ids, err := m.resolve(ctx, at(info.top), "refs/heads/"+branch)
			if err != nil {
				return fail(err)
			}
			res.Commit = ids[0]
		}
	}

	if registered != nil || !res.Missing {
		if _, err := m.git(ctx, at(info.top), "worktree", "remove", "--force", "--", wt.Path); err != nil {
			return fail(err)
		}
	}
	m.forget(wt.Path)
	_ = os.Remove(filepath.Dir(wt.Path)) // the repository namespace, if now empty
	m.dropView(wt.Path)

	if discard {
		for _, w := range wts {
			if w.Branch == "refs/heads/"+branch && filepath.Clean(w.Path) != filepath.Clean(wt.Path) {
				return fail(fmt.Errorf("worktree removed, but branch %s is checked out at %s and was kept", branch, w.Path))
			}
		}
		for _, ref := range []string{"refs/heads/" + branch, CheckpointRefPrefix + wt.Session, MergedRefPrefix + wt.Session} {
			if _, err := m.git(ctx, at(info.top), "update-ref", "-d", ref); err != nil {
				return fail(fmt.Errorf("worktree removed, but: %w", err))
			}
		}
		m.dropCopied(wt.Path)
		res.Discarded = true
	}
	m.log.Info("worktree removed", keySession, wt.Session, keyPath, wt.Path, keyBranch, branch,
		"committed", res.Committed, keyCommit, res.Commit, "discarded", res.Discarded, "missing", res.Missing)
	return res, nil
}

// keep makes the session branch hold tree, the worktree's current state,
// and the worktree's HEAD. It returns the branch tip and whether a commit
// was made.
func (m *Manager) keep(ctx context.Context, l wtLoc, wt Worktree, branch, tree string) (string, bool, error) {
	head, err := m.headOf(ctx, l)
	if err != nil {
		return "", false, err
	}
	return m.joinLocked(ctx, l.repo(), wt, branch, tree, head)
}

// keepMessage is the message of the commit that preserves a removed
// worktree's work.
func keepMessage(wt Worktree) []string {
	return []string{"agentpool: keep the work of session " + wt.Session,
		"agentpool committed the work left in the session's worktree (every change,\n" +
			"tracked and untracked files, .gitignore respected) when the worktree was\n" +
			"removed, so that nothing is lost.", trailers(wt)}
}

// trailers is the last paragraph of a commit the Manager makes of a
// session's work: git trailers naming the session and, if known, its
// agent.
func trailers(wt Worktree) string {
	t := "Agentpool-Session: " + wt.Session
	if a := strings.Join(strings.Fields(wt.Agent), " "); a != "" {
		t += "\nAgentpool-Agent: " + a
	}
	return t
}

// joinLocked moves the session branch so that it contains head (if not
// "") and has tree as its tree (if not "": otherwise the tree of the commit
// it ends on). It fast-forwards when it can, and commits otherwise: on top
// of head, or as a merge of the branch and head when they diverged. It
// returns the new tip and whether a commit was made.
func (m *Manager) joinLocked(ctx context.Context, dir wtLoc, wt Worktree, branch, tree, head string) (string, bool, error) {
	j, err := m.planJoin(ctx, dir, branch, tree, head, keepMessage(wt))
	if err != nil {
		return "", false, err
	}
	if err := m.applyJoin(ctx, dir, j, "agentpool: keep session work"); err != nil {
		return "", false, err
	}
	return j.tip, j.committed, nil
}

// join is a planned move of a session branch (see planJoin).
type join struct {
	ref       string // the branch's full ref name
	old       string // its tip now, "" if it does not exist
	tip       string // its tip after the move
	committed bool   // whether tip is a new commit
}

// planJoin computes joinLocked's move without making it: the commit it
// needs (with message paragraphs msg) is made but not referenced, authored
// as the user (see userIdentity).
func (m *Manager) planJoin(ctx context.Context, dir wtLoc, branch, tree, head string, msg []string) (join, error) {
	ref := "refs/heads/" + branch
	names := []string{ref, ref + "^{tree}"}
	if head != "" {
		names = append(names, head+"^{tree}")
	}
	ids, err := m.resolve(ctx, dir, names...)
	if err != nil {
		return join{}, err
	}
	tip, tipTree, headTree := ids[0], ids[1], ""
	if head != "" {
		headTree = ids[2]
	}
	var parents []string
	parentTree := ""
	switch {
	case head == "" && tip == "":
	case head == "" || head == tip:
		parents, parentTree = []string{tip}, tipTree
	case tip == "":
		parents, parentTree = []string{head}, headTree
	default:
		tipInHead, err := m.isAncestor(ctx, dir, tip, head)
		if err != nil {
			return join{}, err
		}
		headInTip := false
		if !tipInHead {
			if headInTip, err = m.isAncestor(ctx, dir, head, tip); err != nil {
				return join{}, err
			}
		}
		switch {
		case tipInHead:
			parents, parentTree = []string{head}, headTree
		case headInTip:
			parents, parentTree = []string{tip}, tipTree
		default:
			parents = []string{tip, head}
		}
	}
	if tree == "" {
		tree = parentTree
		if len(parents) > 1 {
			tree = headTree
		}
	}
	j := join{ref: ref, old: tip}
	if len(parents) == 1 && tree == parentTree {
		j.tip = parents[0]
		return j, nil
	}
	args := []string{"commit-tree", tree}
	for _, p := range msg {
		args = append(args, "-m", p)
	}
	for _, p := range parents {
		args = append(args, "-p", p)
	}
	out, err := m.run(ctx, call{at: dir, args: args, env: m.userIdentity(ctx, dir)})
	if err != nil {
		return join{}, err
	}
	j.tip, j.committed = strings.TrimSpace(string(out)), true
	return j, nil
}

// applyJoin moves the branch as j planned, if it still is where j found it.
func (m *Manager) applyJoin(ctx context.Context, dir wtLoc, j join, reason string) error {
	if j.tip == j.old {
		return nil
	}
	_, err := m.git(ctx, dir, "update-ref", "-m", reason, j.ref, j.tip, j.old)
	return err
}
