package pool

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

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
	// room in the queue, or it is paced (within the last second), and its
	// output is not read meanwhile. Held is the time its events waited for
	// room in all, Holds how many times they did, Episodes how many times
	// the session was said to be slowed (agent.slowed).
	Slowed   bool          `json:"slowed"`
	Held     time.Duration `json:"held"`
	Holds    int64         `json:"holds"`
	Episodes int64         `json:"episodes,omitempty"`
	// Paced is the time its slowed agent waited, in all, so that its
	// events were taken at Config.SlowedRate while other sessions were
	// at work (see pace).
	Paced time.Duration `json:"paced,omitempty"`
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
	// due is when its events so far would have come at the slowed rate,
	// pacedAt when it last waited for it, paced the pacing waited in all
	// (see pace).
	due, pacedAt time.Time
	paced        time.Duration
	// reniced holds, while the agent's processes run nicer, the
	// niceness each had before the episode, by pid (see reniceAgent).
	reniced map[int]int
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
// ends once that has been so for slowEpisodeGap. It reports whether this
// ended one.
func (w *slowing) free(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slowed && now.Sub(w.last) >= slowEpisodeGap {
		w.slowed = false
		return true
	}
	return false
}

// count returns the episodes so far, the pacing waited in all, and
// whether the session was paced within the last second.
func (w *slowing) count(now time.Time) (int64, time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.episodes, w.paced, w.slowed && !w.pacedAt.IsZero() && now.Sub(w.pacedAt) < time.Second
}

// DefaultSlowedRate is Config.SlowedRate's default: 32 MiB/s, a rate no
// agent reaches but one flooding the pool, and a small share of what the
// daemon can read, store and stream on one core.
const DefaultSlowedRate = 32 << 20

// othersActive is how recently another session must have published for
// a slowed one to be paced: the others are at work.
const othersActive = 100 * time.Millisecond

// paceMinEvent is what an event counts for at least in pacing, in bytes:
// the daemon's work for an event is as much per event as per byte, and a
// flood of 100,000 small updates is paced too (at 32 MiB/s, 32,768 events
// a second).
const paceMinEvent = 1 << 10

// maxPace bounds one event's pacing (a line of many megabytes).
const maxPace = time.Second

// paceBurst is how much unused time at the slowed rate a paced session
// is credited with: events of up to paceBurst's bytes after a pause do not
// wait.
const paceBurst = 100 * time.Millisecond

// pace makes an agent whose session is slowed (its events wait for room
// in the store's write queue, see waitRoom) wait, before its event of n
// bytes (at least paceMinEvent) is queued, until its events so far would
// have come at Config.SlowedRate, while another session published within
// othersActive. The write queue's room holds a flood to what the writer
// commits, but reading, parsing, storing and streaming a flood at that
// pace takes the daemon's CPUs, and the others' turns wait for them:
// paced, the flood's share is bounded and theirs is not. Like a wait for
// room, a pacing wait holds the agent's output (it is not read
// meanwhile), so the agent is the one that waits; nothing is dropped or
// merged, and the episode goes on while it is paced. An agent sending
// slower than the rate (in events of at most paceBurst's bytes) never
// waits; ctx ends a wait early.
func (p *Pool) pace(ctx context.Context, s *session, n int) {
	rate := p.cfg.SlowedRate
	if rate <= 0 {
		return
	}
	now := time.Now()
	w := &s.slowing
	w.mu.Lock()
	if !w.slowed {
		w.mu.Unlock()
		p.lastOther.Store(now.UnixNano())
		return
	}
	if now.UnixNano()-p.lastOther.Load() > int64(othersActive) {
		w.due = time.Time{}
		w.mu.Unlock()
		return
	}
	// due is when the session's events so far would have come at the
	// rate: a virtual clock that an agent sending slower never runs ahead
	// of, credited with at most paceBurst of the time it did not use.
	if earliest := now.Add(-paceBurst); w.due.Before(earliest) {
		w.due = earliest
	}
	n = max(n, paceMinEvent)
	w.due = w.due.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	if w.due.Sub(now) > maxPace {
		w.due = now.Add(maxPace)
	}
	d := w.due.Sub(now)
	if d < time.Millisecond {
		w.mu.Unlock()
		return
	}
	w.last, w.pacedAt = now, now // still slowed: the episode goes on (see free)
	w.paced += d
	w.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
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
		if s.slowing.free(now) {
			p.reniceAgent(s, agent, false)
		}
		return err
	}
	first := s.slowing.held(now)
	if err == nil {
		// The flooding agent also yields the CPUs: the other sessions'
		// agents, and the daemon's work for them, run first while it
		// floods. (Its first waits may come while it starts, before its
		// process group is known: each wait tries until it is done.)
		p.reniceAgent(s, agent, true)
	}
	if err != nil || !first {
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
	now := time.Now()
	p.mu.Lock()
	for i := range qs {
		if s := p.sessions[qs[i].Session]; s != nil {
			var pacing bool
			qs[i].Episodes, qs[i].Paced, pacing = s.slowing.count(now)
			qs[i].Slowed = qs[i].Slowed || pacing
		}
	}
	p.mu.Unlock()
	return qs
}

// slowedNice is how much nicer an agent runs while it is slowed: under
// contention the others' processes (and the daemon's work for them) run
// first; on idle CPUs it changes nothing.
const slowedNice = 10

// reniceAgent makes each process of the process group of s's agent
// slowedNice nicer than it was (slowed), or gives each its niceness back.
// Giving it back needs the privilege to lower a niceness (a daemon
// running as root has it): without it, the agent stays nicer until it
// restarts, which the log says.
func (p *Pool) reniceAgent(s *session, agent string, slowed bool) {
	w := &s.slowing
	w.mu.Lock()
	done := (w.reniced != nil) == slowed
	w.mu.Unlock()
	if done {
		return
	}
	p.mu.Lock()
	e := p.entries[key{s.id, agent}]
	var b backends.Backend
	pgid := 0
	if e != nil {
		pgid, b = e.info.PGID, e.launched
	}
	p.mu.Unlock()
	if pgid == 0 && b != nil {
		pgid = b.Info().PGID // still starting
	}
	if pgid <= 1 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case slowed && w.reniced == nil:
		w.reniced = map[int]int{}
		for pid, nice := range groupNiceness(pgid) {
			if err := unix.Setpriority(unix.PRIO_PROCESS, pid, min(nice+slowedNice, 19)); err == nil {
				w.reniced[pid] = nice
			}
		}
		p.logger.Debug("agent slowed: its processes run nicer", "session", s.id, "agent", agent, "processes", len(w.reniced))
	case !slowed && w.reniced != nil:
		now := groupNiceness(pgid)
		for pid, nice := range w.reniced {
			if _, ok := now[pid]; !ok {
				continue // gone
			}
			if err := unix.Setpriority(unix.PRIO_PROCESS, pid, nice); err != nil {
				p.logger.Info("agent's CPU priority not given back", "session", s.id, "agent", agent, "pid", pid, "nice", nice, "err", err)
			}
		}
		w.reniced = nil
	}
}

// groupNiceness returns the niceness of each process of process group
// pgid, read from /proc.
func groupNiceness(pgid int) map[int]int {
	out := map[int]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		// After the name: state, ppid, pgrp (5th field) ... nice (19th).
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 17 {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err != nil || g != pgid {
			continue
		}
		if nice, err := strconv.Atoi(f[16]); err == nil {
			out[pid] = nice
		}
	}
	return out
}
