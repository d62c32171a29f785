package pool

import (
	"context"
	"fmt"
)

// evictReason is the reason Evict gives in its agent.evicted event and log.
const evictReason = "evicted on request"

// Evict stops the warm backend of (session, agent) now, the way idle
// reaping does: it stops counting as warm at once (a prompt waiting for a
// slot may take its place), an agent.evicted event is published, and the
// backend's stop ladder runs (protocol close, SIGTERM, SIGKILL to its
// process group). Evict returns once the stop has finished. The session
// stays open; the agent starts again, resuming its conversation when it
// can, on the session's next prompt to it.
//
// A backend that runs a turn or is starting (or that a person reserved
// while it starts) is refused with ErrBusy: cancel the turn, or evict it
// once it is idle. No backend for (session, agent), or one that is not
// running (it crashed), is ErrNotFound. A backend already stopping is not
// an error. Once the pool is shutting down, Evict fails with ErrClosed.
//
// The stop is not cut short when ctx ends (the backend is no longer
// usable by then): it finishes within the pool's StopTimeout.
func (p *Pool) Evict(ctx context.Context, session, agent string) error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return fmt.Errorf("evict agent %q of session %q: pool: %w", agent, session, ErrClosed)
	}
	e := p.entries[key{session, agent}]
	if err := evictableLocked(e, session, agent); err != nil || e.state != StateIdle {
		p.mu.Unlock()
		return err // nil: already stopping or stopped
	}
	e.state = StateStopping
	p.serveQueueLocked() // its slot is free now
	p.mu.Unlock()

	p.evictions.Add(1)
	p.emit(e.sess, "agent.evicted", agent, map[string]string{"reason": evictReason})
	p.stopEntry(context.WithoutCancel(ctx), e, evictReason)
	return nil
}

// evictableLocked says why e, the entry of (session, agent) or nil, cannot
// be evicted; nil means it can, or is already on its way out (stopping or
// stopped).
func evictableLocked(e *entry, session, agent string) error {
	if e == nil {
		return fmt.Errorf("no warm agent %q in session %q: %w", agent, session, ErrNotFound)
	}
	switch st := e.stateLocked(); st {
	case StateIdle, StateStopping, StateStopped:
		return nil
	case StateBusy:
		return fmt.Errorf("agent %q of session %q is running a turn; cancel it, or evict the agent once it is idle: %w", agent, session, ErrBusy)
	case StateStarting:
		return fmt.Errorf("agent %q of session %q is starting; evict it once it is idle: %w", agent, session, ErrBusy)
	case StateCrashed:
		return fmt.Errorf("agent %q of session %q is not running (it crashed); nothing to evict: %w", agent, session, ErrNotFound)
	default:
		return fmt.Errorf("agent %q of session %q is %s; nothing to evict: %w", agent, session, st, ErrNotFound)
	}
}
