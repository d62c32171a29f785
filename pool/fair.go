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
	p.mu.Lock()
	for i := range qs {
		if s := p.sessions[qs[i].Session]; s != nil {
			qs[i].Episodes = s.slowing.count()
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
