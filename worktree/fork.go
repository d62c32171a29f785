package worktree

import (
	"context"
	"fmt"
	"path/filepath"
)

// Snapshot is the state of a worktree at one moment, as Snap reads it.
type Snapshot struct {
	// Tree is the tree of every file of the worktree (tracked ones as
	// they are on disk, untracked ones that are not ignored; deleted
	// ones absent), as Checkpoint records it.
	Tree string
	// Head is the commit HEAD named ("" when none).
	Head string
}

// Snap reads the whole state of the worktree, uncommitted changes
// included, without touching it: its files, index, HEAD and branch stay
// as they are, and no checkpoint is anchored. It works on a copy of the
// index through GIT_INDEX_FILE, as Checkpoint does, and takes no lock a
// running turn waits for, so that a session can be forked while its agent
// works. Its tree is kept by git for as long as loose objects are (two
// weeks by default): use it at once, as Fork does with Restore.
func (m *Manager) Snap(ctx context.Context, wt Worktree) (Snapshot, error) {
	if err := ValidSession(wt.Session); err != nil {
		return Snapshot{}, err
	}
	if !filepath.IsAbs(wt.Path) {
		return Snapshot{}, fmt.Errorf("worktree path %q is not absolute", wt.Path)
	}
	l, err := m.open(ctx, wt)
	if err != nil {
		return Snapshot{}, err
	}
	// HEAD first: a commit the agent makes meanwhile is then in the
	// tree, as uncommitted work of the fork, rather than lost.
	head, err := m.headOf(ctx, l)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot session %q: %w", wt.Session, err)
	}
	tree, err := m.snapshot(ctx, l)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot session %q: %w", wt.Session, err)
	}
	return Snapshot{Tree: tree, Head: head}, nil
}

// StartAt points the worktree's branch, and its index, at commit, and
// leaves its files as they are: what differs from commit shows as
// uncommitted work. A fork made from a spare (a worktree made ahead at
// the repository's head) uses it to start where the session forked
// started, before Restore puts that session's files in place. The
// worktree must be one nobody works in yet: its branch's own commits, if
// any, are no longer on it. The branch is moved in the repository (never
// through the worktree's HEAD, which an agent can write) and in the
// agent's view.
func (m *Manager) StartAt(ctx context.Context, wt Worktree, commit string) error {
	if err := validRev(commit); err != nil {
		return err
	}
	info, st, l, unlock, err := m.lockWorktree(ctx, wt)
	if err != nil {
		return err
	}
	defer unlock()
	fail := func(err error) error { return fmt.Errorf("start session %q at %s: %w", wt.Session, commit, err) }
	branch := branchOf(wt)
	if h, _ := readGitFile(filepath.Join(l.admin, "HEAD")); h != "ref: refs/heads/"+branch {
		return fail(fmt.Errorf("its HEAD does not name its branch %s", branch))
	}
	repo := repoAt(info)
	ids, err := m.resolve(ctx, repo, commit+"^{commit}", "refs/heads/"+branch)
	if err != nil {
		return fail(err)
	}
	to, old := ids[0], ids[1]
	switch {
	case to == "":
		return fmt.Errorf("%w: %q is not a commit of %s", ErrUnknownRef, commit, wt.Repo)
	case old == "":
		return fail(fmt.Errorf("no branch %s", branch))
	case to == old:
		return nil
	}
	if _, err := m.git(ctx, repo, "update-ref", "-m", "agentpool: fork into session "+wt.Session, "refs/heads/"+branch, to, old); err != nil {
		return fail(err)
	}
	m.exportLocked(ctx, info, wt, st, old)
	if _, err := m.git(ctx, l, "read-tree", "--reset", to); err != nil {
		return fail(fmt.Errorf("reset its index: %w", err))
	}
	return nil
}

// lockWorktree takes the repository's lock and the worktree's, for an
// operation that moves its branch, and opens it; unlock releases both.
func (m *Manager) lockWorktree(ctx context.Context, wt Worktree) (info repoInfo, st *wtState, l wtLoc, unlock func(), err error) {
	if info, err = m.repo(ctx, wt.Repo); err != nil {
		return repoInfo{}, nil, wtLoc{}, nil, err
	}
	lock := m.repoLock(info.common)
	lock.Lock()
	st = m.state(wt.Path)
	st.mu.Lock()
	unlock = func() {
		st.mu.Unlock()
		lock.Unlock()
	}
	if l, err = m.open(ctx, wt); err != nil {
		unlock()
		return repoInfo{}, nil, wtLoc{}, nil, err
	}
	return info, st, l, unlock, nil
}
