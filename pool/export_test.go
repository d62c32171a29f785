package pool

// SetMaxQueued sets how many prompts may wait for a backend slot, for
// tests of the queue's bound.
func SetMaxQueued(p *Pool, n int) {
	p.mu.Lock()
	p.slots.max = n
	p.mu.Unlock()
}
