package pool

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// makeRoomLocked makes room for one more backend: under MaxWarm and the
// memory budget, by evicting least recently used idle backends. Busy and
// starting backends are never evicted. It fails with ErrAtCapacity, saying
// why, when nothing can be evicted, and also while prompts wait in the
// slot queue and the caller is not the waiter being served: a slot that
// frees up goes to the first waiter, never to a newcomer.
func (p *Pool) makeRoomLocked() error {
	if err := p.waitersAheadLocked(); err != nil {
		return err
	}
	// Spares go first (see spares.go).
	for p.overLimitLocked() && p.evictSpareLocked("a backend slot was needed") {
	}
	var warm, idle []*entry
	for _, e := range p.entries {
		if !e.warmLocked() {
			continue
		}
		warm = append(warm, e)
		if e.state == StateIdle && !e.inUse {
			idle = append(idle, e)
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].lastActive.Before(idle[j].lastActive) })
	var evict []*entry
	n := len(warm) + p.slots.reserved
	for n >= p.cfg.MaxWarm {
		if len(idle) == 0 {
			return fmt.Errorf("%w: all %d warm backends are busy or starting (%d more slots are promised to queued prompts); none is idle to evict (max_warm %d)", ErrAtCapacity, len(warm), p.slots.reserved, p.cfg.MaxWarm)
		}
		evict = append(evict, idle[0])
		idle = idle[1:]
		n--
	}
	if p.cfg.MemoryBudget > 0 {
		rss := p.budgetRSS()
		var used int64
		for _, e := range warm {
			used += rss[e.info.PGID]
		}
		for _, e := range evict {
			used -= rss[e.info.PGID]
		}
		for used >= p.cfg.MemoryBudget {
			if len(idle) == 0 {
				return fmt.Errorf("%w: agents use %d MiB of the %d MiB memory budget and none is idle to evict", ErrAtCapacity, used>>20, p.cfg.MemoryBudget>>20)
			}
			evict = append(evict, idle[0])
			used -= rss[idle[0].info.PGID]
			idle = idle[1:]
		}
	}
	for _, e := range evict {
		e.state = StateStopping
		p.evictions.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.emit(e.sess, "agent.evicted", e.key.agent, map[string]string{"reason": "least recently used idle backend, to make room"})
			p.stopEntry(context.Background(), e, "evicted to make room")
		}()
	}
	return nil
}

// overLimitLocked says whether one more backend would pass MaxWarm.
func (p *Pool) overLimitLocked() bool {
	n := p.slots.reserved
	for _, e := range p.entries {
		if e.warmLocked() {
			n++
		}
	}
	return n >= p.cfg.MaxWarm
}

// freeSlotLocked says why one more backend cannot start without evicting
// any: prompts wait in the slot queue (a free slot is theirs), MaxWarm is
// reached (slots promised to waiters count), or the agents use the whole
// memory budget. nil means a slot is free. A warm-up (see warmup.go) asks
// it instead of makeRoomLocked: it takes only a free slot.
func (p *Pool) freeSlotLocked() error {
	if n := len(p.slots.waiters); n > 0 {
		return fmt.Errorf("%w: %d prompts wait for a backend slot (max_warm %d)", ErrAtCapacity, n, p.cfg.MaxWarm)
	}
	var warm []*entry
	for _, e := range p.entries {
		if e.warmLocked() {
			warm = append(warm, e)
		}
	}
	if n := len(warm) + p.slots.reserved; n >= p.cfg.MaxWarm {
		return fmt.Errorf("%w: %d of the %d backend slots are taken (max_warm %d)", ErrAtCapacity, n, p.cfg.MaxWarm, p.cfg.MaxWarm)
	}
	if p.cfg.MemoryBudget > 0 {
		rss := p.budgetRSS()
		var used int64
		for _, e := range warm {
			used += rss[e.info.PGID]
		}
		if used >= p.cfg.MemoryBudget {
			return fmt.Errorf("%w: agents use %d MiB of the %d MiB memory budget", ErrAtCapacity, used>>20, p.cfg.MemoryBudget>>20)
		}
	}
	return nil
}

// ReapIdle stops backends idle for longer than their idle timeout (the
// provider's, else the pool's). Run calls it periodically.
func (p *Pool) ReapIdle() {
	now := p.cfg.Now()
	p.mu.Lock()
	var reap []*entry
	for _, e := range p.entries {
		if e.state != StateIdle || e.inUse || e.sess.spare {
			continue // a spare waits to be adopted (see spares.go)
		}
		limit := p.cfg.IdleTimeout
		if e.spec.IdleTimeout > 0 {
			limit = e.spec.IdleTimeout
		}
		if now.Sub(e.lastActive) >= limit {
			e.state = StateStopping
			reap = append(reap, e)
		}
	}
	if len(reap) > 0 {
		p.serveQueueLocked()
	}
	p.mu.Unlock()
	for _, e := range reap {
		p.evictions.Add(1)
		p.emit(e.sess, "agent.evicted", e.key.agent, map[string]any{"reason": "idle", "idle_for": now.Sub(e.lastActive).String()})
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.stopEntry(context.Background(), e, "idle") }()
	}
}

// ProviderChanged reacts to a registry change: backends of disabled or
// removed providers stop now when idle and after their turn when busy;
// backends whose launch spec changed are recycled when next idle.
func (p *Pool) ProviderChanged(disabled, specChanged []string) {
	in := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	p.mu.Lock()
	var stop []*entry
	for _, e := range p.entries {
		gone, changed := in(disabled, e.key.agent), in(specChanged, e.key.agent)
		if !gone && !changed {
			continue
		}
		e.retire = e.retire || gone
		e.recycle = e.recycle || changed
		if e.state == StateIdle && !e.inUse {
			stop = append(stop, e)
		}
	}
	p.mu.Unlock()
	for _, e := range stop {
		reason := "provider disabled"
		if !e.retire {
			reason = "launch spec changed"
		}
		p.emit(e.sess, "agent.evicted", e.key.agent, map[string]string{"reason": reason})
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.stopEntry(context.Background(), e, reason) }()
	}
}

// Backends lists every backend the pool holds, for `ps`.
func (p *Pool) Backends() []AgentStatus { return p.backends("") }

// backendsOf is Backends for one session's agents, without their memory
// (RSS 0): reading it scans every process of the system, which a
// session's create should not wait for; Get and the pool's view have it.
func (p *Pool) backendsOf(session string) []AgentStatus { return p.backends(session) }

// backends is Backends, of one session's agents when session is set.
func (p *Pool) backends(session string) []AgentStatus {
	now := p.cfg.Now()
	p.mu.Lock()
	list := make([]*entry, 0, len(p.entries))
	for _, e := range p.entries {
		if session == "" || e.key.session == session {
			list = append(list, e)
		}
	}
	out := make([]AgentStatus, 0, len(list))
	for _, e := range list {
		st := AgentStatus{Session: e.key.session, Agent: e.key.agent, Kind: e.spec.Kind, State: e.stateLocked(),
			PID: e.info.PID, LastActive: e.lastActive, Restarts: e.restarts, AgentSessionID: e.info.AgentSessionID, Mode: e.info.CurrentMode}
		if st.State == StateIdle {
			st.IdleFor = now.Sub(e.lastActive).Round(time.Second)
		}
		st.MCPServers = e.info.MCPServers
		st.Spare = e.sess.spare
		if e.info.PID > 0 && e.info.Confinement.Containment != "" {
			c := e.info.Confinement
			st.Confinement = &c
		}
		if e.err != nil {
			st.Error = e.err.Error()
		}
		out = append(out, st)
	}
	p.mu.Unlock()
	if len(out) > 0 && session == "" {
		rss := p.cfg.GroupRSS()
		for i := range out {
			if out[i].PID != 0 {
				out[i].RSS = rss[out[i].PID]
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Session != out[j].Session {
			return out[i].Session < out[j].Session
		}
		return out[i].Agent < out[j].Agent
	})
	return out
}
