package pool

import (
	"sync"
	"sync/atomic"

	"github.com/agentpool/agentpool/backends"
)

// Subscription delivers a session's events: first Backlog (stored events
// after the requested seq), then live events on C, with no gap and no
// duplicate. C is closed when the subscription ends; Err says why.
type Subscription struct {
	// Backlog holds the events after the requested seq that existed when
	// the subscription was made, in order.
	Backlog []backends.Event
	// C carries every later event, in order.
	C <-chan backends.Event

	ch    chan backends.Event
	once  sync.Once
	mu    sync.Mutex
	err   error
	unsub func(*Subscription)
}

// Close ends the subscription. It is idempotent.
func (s *Subscription) Close() {
	if s.unsub != nil {
		s.unsub(s)
	}
	s.end(nil)
}

// Err says why C was closed: ErrSlowSubscriber, ErrClosed, or nil after Close.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Subscription) end(err error) {
	s.once.Do(func() {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.ch)
	})
}

// fanout is a set of subscribers plus a ring of recent events. Its owner
// serialises calls (the session lock, or the fanout's own for the global one).
type fanout struct {
	mu      sync.Mutex // used only by the global fanout
	subs    map[*Subscription]struct{}
	buf     int
	ring    []backends.Event // grows to max, then wraps at next
	max     int
	next    int
	full    bool
	dropped *atomic.Int64
}

func newFanout(buf, ring int, dropped *atomic.Int64) *fanout {
	return &fanout{subs: map[*Subscription]struct{}{}, buf: buf, max: ring, dropped: dropped}
}

// publish records ev in the ring and offers it to every subscriber; a
// subscriber whose buffer is full is dropped, never waited for.
func (f *fanout) publish(ev backends.Event) {
	switch {
	case f.max == 0:
	case len(f.ring) < f.max:
		f.ring = append(f.ring, ev)
		f.full = len(f.ring) == f.max
	default:
		f.ring[f.next] = ev
		f.next = (f.next + 1) % f.max
	}
	for s := range f.subs {
		select {
		case s.ch <- ev:
		default:
			delete(f.subs, s)
			f.dropped.Add(1)
			s.end(ErrSlowSubscriber)
		}
	}
}

// since returns the ring's events with seq > after, and whether the ring
// covers everything after it (i.e. nothing older is needed from the store).
func (f *fanout) since(after, last int64) ([]backends.Event, bool) {
	if after >= last {
		return nil, true
	}
	n := len(f.ring)
	if n == 0 {
		return nil, false
	}
	oldest := f.ring[0]
	if f.full {
		oldest = f.ring[f.next]
	}
	if oldest.Seq > after+1 {
		return nil, false
	}
	out := make([]backends.Event, 0, last-after)
	for i := 0; i < n; i++ {
		idx := i
		if f.full {
			idx = (f.next + i) % len(f.ring)
		}
		if ev := f.ring[idx]; ev.Seq > after {
			out = append(out, ev)
		}
	}
	return out, true
}

func (f *fanout) add() *Subscription {
	ch := make(chan backends.Event, f.buf)
	s := &Subscription{C: ch, ch: ch}
	f.subs[s] = struct{}{}
	return s
}

func (f *fanout) remove(s *Subscription) { delete(f.subs, s) }

func (f *fanout) closeAll(err error) {
	for s := range f.subs {
		delete(f.subs, s)
		s.end(err)
	}
}
