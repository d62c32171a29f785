// Package acpfs answers an ACP agent's fs/* and terminal/* requests inside one
// session worktree.
//
// A Guard turns an agent-supplied absolute path into a path relative to the
// worktree root, or refuses it: relative paths, NUL bytes, paths outside the
// root (separator-bounded, so a sibling "<root>-evil" is outside), symlinks
// that lead outside (also through a parent directory), symlink loops and, for
// writes, the worktree's .git. Every file operation then goes through an
// os.Root opened on the worktree, so a symlink swapped in between the check
// and the use cannot escape either.
//
// FS is the fs bridge: ReadTextFile with a 1-based line and a line limit, a
// size limit and a text check; WriteTextFile that creates parent directories
// and replaces the file atomically, keeping its mode. Each operation is
// reported to an audit callback as an Op.
//
// Terminals runs terminal/* commands: each in its own process group with a
// parent-death signal, a wall-clock limit, a bounded output buffer truncated
// from the beginning at a UTF-8 boundary, and a cap on how many run at once.
// Closing Terminals kills every process group it started and waits for all of
// its goroutines.
//
// The package imports no other agentpool package.
package acpfs
