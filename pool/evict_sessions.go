package pool

// Closed sessions leave memory. Close empties the ring of the session it
// closed, whose subscriptions still behind read the store from then on, and
// drops the session from p.sessions (forgetClosed); loadSession caches no
// session that it loads closed. So a closed session's *session and feed are
// freed once its last subscription is dropped, and a subscription that
// stays open holds no event. A later Get, List or Subscribe loads it again
// from the store, closed and with an empty ring: its subscribers read every
// event from the store, then get ErrClosed.
//
// Closed is final, so a session loaded closed is never stale. One loaded
// open may be, if its session was closed and forgotten while it was read
// from the store: loadSession compares p.forgotten before and after, and
// loads it again when a session was forgotten meanwhile.

// forgetClosed empties s's ring and drops s from p.sessions once it is
// closed and runs no turn (a turn that slipped in keeps it, as before).
// Nothing publishes to a closed session after Close: its backends have
// stopped (their exit events are published before Stop returns) and its
// permission requests are cancelled, so no second *session of the same id
// can reuse a seq.
func (p *Pool) forgetClosed(s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.mu.Lock()
	done := s.closed && s.turn == nil
	s.mu.Unlock()
	if !done {
		return
	}
	s.feed.dropRing()
	if p.sessions[s.id] == s {
		delete(p.sessions, s.id)
		p.forgotten++
	}
}
