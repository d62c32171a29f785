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
// empty hooks directory owned by the Manager), no fsmonitor, pager, editor
// or terminal prompt, commit signing off, the repository-selecting GIT_*
// variables of the daemon's environment removed, and an explicit identity,
// so that nothing depends on the user's global git configuration. Git 2.36
// or newer is required.
//
// Agents may write their worktree and its admin directory
// (<common>/worktrees/<id>), so git never learns where the repository is
// from them: the common directory comes from the user's repository, the
// admin directory from git's records under it (cached from Create on), and
// git runs in a worktree with GIT_DIR and GIT_COMMON_DIR set to the common
// directory, GIT_WORK_TREE to the worktree and GIT_INDEX_FILE to its index.
// The worktree's .git file, its admin directory's commondir and
// config.worktree files are never obeyed; a tampered .git or gitdir file is
// repaired by Remove and Reconcile. GitPaths gives a sandbox the directories
// to grant.
//
// Where the launcher gives an agent a mount namespace, the shared object
// store and ref directory are read-only in its view, and its git writes
// its objects and its branch into the worktree's private git view instead
// (GitView, see view.go), so that it can neither rewrite an object of the
// repository nor move another session's branch. The Manager imports what
// the agent committed there, verified, before every operation that reads
// or moves the session branch (ImportAgentHistory): the branch only ever
// fast-forwards to it. After every operation that moves the branch, the
// Manager writes its tip back into the view.
package worktree
