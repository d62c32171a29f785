package acpfs

import (
	"context"
	"sync"
)

// budget is a weighted semaphore with FIFO waiters: a read waits until its
// weight fits, and a large read is not starved by a stream of small ones.
type budget struct {
	size int64

	mu      sync.Mutex
	used    int64
	peak    int64 // the most used at once, for tests
	waiters []*budgetWaiter
}

// peakUsed returns the most of b used at once so far.
func (b *budget) peakUsed() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

// acquire takes n (at most size) from b, waiting while it does not fit. A
// cancelled ctx gives up and returns its error.
func (b *budget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+n <= b.size {
		b.used += n
		b.peak = max(b.peak, b.used)
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.ready: // granted meanwhile: give it back
			b.used -= n
		default:
			for i, x := range b.waiters {
				if x == w {
					b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
					break
				}
			}
		}
		b.wakeLocked()
		return ctx.Err()
	}
}

// release gives n back to b.
func (b *budget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.wakeLocked()
}

// wakeLocked grants the waiters at the front that fit, in order.
func (b *budget) wakeLocked() {
	for len(b.waiters) > 0 && b.used+b.waiters[0].n <= b.size {
		w := b.waiters[0]
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
		b.used += w.n
		b.peak = max(b.peak, b.used)
		close(w.ready)
	}
}
