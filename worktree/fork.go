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
