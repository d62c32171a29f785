// Package wiring joins agentpool's concrete parts to the interfaces the pool
// declares: the SQLite store, the worktree manager, and a launcher that
// builds ACP backends (with the worktree's fs bridge and terminals) and
// PTY backends. Only cmd/agentpool and end-to-end tests use it.
package wiring
