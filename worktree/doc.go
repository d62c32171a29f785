// Package worktree gives every agentpool session its own git worktree of the
// user's repository and keeps the work done in it safe.
//
// A Manager creates a worktree per session on the branch agentpool/<session>,
// under its own root directory (never inside the user's repository), removes
// it without losing uncommitted work, takes checkpoints of the whole worktree
// state (tracked and untracked files, .gitignore respected) without touching
// HEAD, the index or any file, diffs and restores them, and reconciles what
// the database knows with what git and the disk hold at startup.
//
// Nothing is destroyed unless the caller says so: Remove commits leftover
// work to the session branch unless asked to discard it, Restore anchors the
// state it replaces, and Reconcile only reports unless asked to prune, and
// even then preserves work before removing a worktree.
//
// Every git call runs through exec.CommandContext with hooks disabled (an
// empty hooks directory owned by the Manager), no terminal prompts, commit
// signing off, the repository-selecting GIT_* variables of the daemon's
// environment removed, and an explicit identity, so that nothing depends on
// the user's global git configuration. Git 2.36 or newer is required.
package worktree
