package pool

// RingRetained returns the bytes the ring of session id holds now and the
// most it ever held; ok is false when the session is not in memory.
func (p *Pool) RingRetained(id string) (now, peak int64, ok bool) {
	p.mu.Lock()
	s := p.sessions[id]
	p.mu.Unlock()
	if s == nil {
		return 0, 0, false
	}
	now, peak = s.feed.retained()
	return now, peak, true
}

// GlobalRingRetained returns the bytes the daemon-wide stream's ring holds
// now and the most it ever held.
func (p *Pool) GlobalRingRetained() (now, peak int64) {
	return p.global.retained()
}
