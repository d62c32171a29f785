package pool

import (
	"context"
	"fmt"

	"github.com/agentpool/agentpool/backends"
)

// A session's warm-up starts its agent in the background once the session
// exists (Create, unless CreateRequest.Warm is false), so that a first
// prompt typed after the agent's start finds it ready, as fast as a warm
// one.
//
// The warm-up waits for the worktree's setup first, so the agent starts in
// a prepared worktree as a prompt's would. Then it takes a free backend
// slot, or none: it never evicts a backend (busy or idle) and never takes
// a slot while prompts wait in the slot queue; with no free slot it
// publishes EventAgentWarmSkipped and the first prompt starts the agent as
// before. Its entry is not reserved: a prompt that arrives during the
// start takes it and waits for that start, so there is never a second
// agent. The start is the pool's usual one (agent.starting with warm_up
// true, agent.ready, or an error event with stage start, and the failure
// counts as a crash); it never fails the Create. Closing the session or
// shutting the pool down cuts it short like any start: the entry is
// stopped, and with it the process the start spawned.
const (
	// EventAgentWarmSkipped says that a session's warm-up did not start
	// its agent (data: reason); its first prompt starts it.
	EventAgentWarmSkipped backends.EventType = "agent.warm_skipped"
)

// warmOn says whether Create starts the session's agent in the background.
func (r CreateRequest) warmOn() bool {
	return r.Warm == nil || *r.Warm
}

// startWarmUp runs the warm-up of agent, s's first agent, in a goroutine
// the pool owns. Nothing runs once the pool is closing.
func (p *Pool) startWarmUp(s *session, agent string) {
	p.mu.Lock()
	if p.closing {
		e := p.takeEarlyLocked(key{s.id, agent})
		p.mu.Unlock()
		if e != nil {
			e.Close()
		}
		return
	}
	// Added under p.mu while not closing: before Shutdown waits for p.wg.
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.warmUp(s, agent)
	}()
	p.mu.Unlock()
}

// warmUp waits for s's worktree setup, starts agent if a slot is free,
// and waits for the start to end.
func (p *Pool) warmUp(s *session, agent string) {
	s.mu.Lock()
	wt := s.wt
	s.mu.Unlock()
	// Checkpoint waits for a setup still running (see Worktrees). The
	// checkpoint it takes is the one the first prompt takes unless the
	// worktree changes before: nothing is lost, and that prompt's own
	// checkpoint is quicker. A failure here shows again at the start or
	// at the prompt, which report it.
	if _, err := p.cfg.Worktrees.Checkpoint(p.ctx, wt); err != nil {
		p.logger.Debug("warm-up: waiting for the worktree's setup", "session", s.id, "agent", agent, "err", err)
	}
	p.mu.Lock()
	e, err := p.startWarmUpLocked(s, agent)
	// A start takes what was started early when it begins (early.go):
	// what is left, none will.
	unused := p.takeEarlyLocked(key{s.id, agent})
	p.mu.Unlock()
	if unused != nil {
		unused.Close()
	}
	switch {
	case err != nil:
		p.logger.Info("agent warm-up skipped", "session", s.id, "agent", agent, "reason", err)
		p.emitOpen(s, EventAgentWarmSkipped, agent, map[string]string{"reason": err.Error()})
		return
	case e == nil:
		return
	}
	<-e.started // start ends once stopped (Close, Shutdown) or after StartTimeout
	p.settleWarmUp(e)
}

// startWarmUpLocked adds and starts the unreserved entry of (s, agent). It
// returns nil and no error when there is nothing to do: the pool or the
// session is closing, agent is no longer the session's active agent, or
// it has an entry already (a prompt came first). It fails with the
// resolver's error when the agent cannot launch any more, and with
// ErrAtCapacity, saying why, when no slot is free without evicting.
func (p *Pool) startWarmUpLocked(s *session, agent string) (*entry, error) {
	s.mu.Lock()
	gone := s.closed || s.rec.ActiveAgent != agent
	s.mu.Unlock()
	if p.closing || gone || p.entries[key{s.id, agent}] != nil {
		return nil, nil
	}
	spec, err := p.cfg.Resolver.Resolve(agent)
	if err != nil {
		return nil, fmt.Errorf("agent %q: %w", agent, err)
	}
	// A session's agent goes before spares (see spares.go).
	for len(p.slots.waiters) == 0 && p.overLimitLocked() && p.evictSpareLocked("a session's agent warms up") {
	}
	if err := p.freeSlotLocked(); err != nil {
		return nil, fmt.Errorf("no free backend slot, and a warm-up evicts nothing but spares: %w", err)
	}
	return p.startEntryLocked(s, agent, spec, nil, 0, true), nil
}

// settleWarmUp does for a warm-up's entry, once its start has ended, what
// release does after a turn, unless a prompt took the entry meanwhile (its
// turn releases it): the agent counts as idle from now; a prompt waiting
// for a slot may take this one (or the slot a failed start held); and an
// agent whose provider changed while it started stops.
func (p *Pool) settleWarmUp(e *entry) {
	p.mu.Lock()
	if e.inUse {
		p.mu.Unlock()
		return
	}
	e.lastActive = p.cfg.Now()
	stop := (e.retire || e.recycle) && e.state == StateIdle
	if stop {
		e.state = StateStopping // no prompt takes it now
	}
	p.serveQueueLocked()
	p.mu.Unlock()
	if stop {
		p.stopEntry(context.Background(), e, "provider changed")
	}
}

// emitOpen publishes an event on s unless s is closed or closing: nothing
// may follow session.closed, and Close marks the session closed under s.mu
// before it publishes that.
func (p *Pool) emitOpen(s *session, t backends.EventType, agent string, data any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	p.publishLocked(s, backends.Event{Time: p.cfg.Now(), Type: t, Agent: agent, Data: backends.MustJSON(data)})
	p.published.Add(1)
}
