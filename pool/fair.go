package pool

import (
	"context"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// WriteQueue is what one session has in the store's write queue, and how
// long its agent was held waiting for room there (see Pool.WriteQueues).
type WriteQueue struct {
	Session string `json:"session"`
	// Events and Bytes are its events (and the writes ordered with them)
	// queued or being written, and their bytes.
	Events int   `json:"events"`
	Bytes  int64 `json:"bytes"`
	// Oldest is how long its oldest queued event has waited for the
	// writer.
	Oldest time.Duration `json:"oldest"`
	// Slowed says that its agent is being held now: its events wait for
	// room in the queue, and its output is not read meanwhile. Held is the
	// time its events waited for room in all, Holds how many times they
	// did, Episodes how many times the session was said to be slowed
	// (agent.slowed).
	Slowed   bool          `json:"slowed"`
	Held     time.Duration `json:"held"`
	Holds    int64         `json:"holds"`
	Episodes int64         `json:"episodes,omitempty"`
}

// SlowedData is the Data of an agent.slowed event.
type SlowedData struct {
	Message string `json:"message"`
	// QueuedEvents and QueuedBytes are what the session had in the write
	// queue when it was first held.
	QueuedEvents int   `json:"queued_events"`
	QueuedBytes  int64 `json:"queued_bytes"`
}

// SlowedMessage is the message of an agent.slowed event.
const SlowedMessage = "the agent is sending faster than it can be stored; it is being slowed"

// slowEpisodeGap is how long a session's events must find room at once
// before another wait starts a new episode (a new agent.slowed): a flood
// that is held again and again in one burst says so once.
const slowEpisodeGap = 2 * time.Second

// slowing is what the pool knows of the times a session's agent was held
// waiting for room in the store's write queue.
type slowing struct {
	mu       sync.Mutex
	slowed   bool      // an episode is under way
	last     time.Time // when a wait last ended
	episodes int64
}

// held notes that an event of the session waited for room; it reports
// whether this wait starts an episode (the session is to say so).
func (w *slowing) held(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = now
	if w.slowed {
		return false
	}
	w.slowed = true
	w.episodes++
	return true
}

// free notes that an event of the session found room at once: an episode
// ends once that has been so for slowEpisodeGap.
func (w *slowing) free(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slowed && now.Sub(w.last) >= slowEpisodeGap {
		w.slowed = false
	}
}

// count returns the episodes so far.
func (w *slowing) count() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.episodes
}

// waitRoom waits for room in the store's write queue for an event of s,
// outside s's lock: an agent whose events wait there is not read
// meanwhile (its backend delivers one event at a time), so it is the one
// slowed, and the others' events are not held behind its. The first wait
// of an episode is told in the session's events (agent.slowed), once.
// It returns the store's error (ctx ended, the store closed).
func (p *Pool) waitRoom(ctx context.Context, s *session, agent string) error {
	waited, err := p.cfg.Store.WaitRoomFor(ctx, s.id)
	now := time.Now()
	if waited <= 0 {
		s.slowing.free(now)
		return err
	}
	if err != nil || !s.slowing.held(now) {
		// Said once per episode; and not when the wait ended without
		// room (a turn that is ending, a store that closes): the notice
		// would not find room either.
		return err
	}
	d := SlowedData{Message: SlowedMessage}
	for _, q := range p.cfg.Store.WriteQueues() {
		if q.Session == s.id {
			d.QueuedEvents, d.QueuedBytes = q.Events, q.Bytes
		}
	}
	p.logger.Info("agent slowed: its events wait for room in the store's write queue", "session", s.id,
		"agent", agent, "waited", waited, "queued_events", d.QueuedEvents, "queued_bytes", d.QueuedBytes)
	ev := backends.Event{Time: p.cfg.Now(), Type: backends.EventAgentSlowed, Agent: agent, Data: backends.MustJSON(d)}
	s.mu.Lock()
	p.queueLocked(s, ev, nil)
	s.mu.Unlock()
	p.published.Add(1)
	return err
}

// WriteQueues returns, for each session with events in the store's write
// queue or whose agent was held waiting for room there lately, what it
// has there and how long it waited.
func (p *Pool) WriteQueues() []WriteQueue {
	qs := p.cfg.Store.WriteQueues()
	p.mu.Lock()
	for i := range qs {
		if s := p.sessions[qs[i].Session]; s != nil {
			qs[i].Episodes = s.slowing.count()
		}
	}
	p.mu.Unlock()
	return qs
}
