// Package pool is the AgentPool: sessions, each with its own git worktree,
// and warm backends keyed by (session, agent). It runs turns one at a time
// per session with a checkpoint before and after each, gives every event a
// sequence number, stores it and fans it out to subscribers without gaps,
// routes permission requests through a broker, keeps the number and the
// memory of warm agents within limits, restarts crashed agents (resuming
// their session when the agent can), reacts to provider changes and
// recovers from its own restart.
//
// The pool knows no concrete backend, store, worktree manager or registry:
// it declares what it needs of them (Store, Worktrees, Resolver, Launcher)
// and cmd/agentpool wires the real ones in.
package pool
