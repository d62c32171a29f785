package httpapi

import (
	"github.com/agentpool/agentpool/pool"
)

// writeQueueLister is what a Pool may also be: one whose store's write
// queue tells what each session has there (pool.Pool.WriteQueues).
type writeQueueLister interface {
	WriteQueues() []pool.WriteQueue
}

// writeQueues returns the pool's write queues by session, nil when the
// pool does not tell them.
func (s *Server) writeQueues() []pool.WriteQueue {
	if wl, ok := s.pool.(writeQueueLister); ok {
		return wl.WriteQueues()
	}
	return nil
}

// collectWriteQueues adds, per session with events in the store's write
// queue (or whose agent was held waiting for room there lately), what it
// has queued, how long its oldest event has waited, and how long its
// agent was held: the fairness between sessions, seen from outside.
func (s *Server) collectWriteQueues(e *exposition) {
	qs := s.writeQueues()
	const ns = metricsNamespace
	var events, bytes, oldest, held, holds, paced, slowed, episodes []series
	for _, q := range qs {
		l := []label{{"session", q.Session}}
		events = append(events, series{labels: l, value: float64(q.Events)})
		bytes = append(bytes, series{labels: l, value: float64(q.Bytes)})
		oldest = append(oldest, series{labels: l, value: q.Oldest.Seconds()})
		held = append(held, series{labels: l, value: q.Held.Seconds()})
		holds = append(holds, series{labels: l, value: float64(q.Holds)})
		paced = append(paced, series{labels: l, value: q.Paced.Seconds()})
		v := 0.0
		if q.Slowed {
			v = 1
		}
		slowed = append(slowed, series{labels: l, value: v})
		episodes = append(episodes, series{labels: l, value: float64(q.Episodes)})
	}
	e.add(ns+"write_queue_events", "Events queued for the store's writer or being written, by session.", typeGauge, events...)
	e.add(ns+"write_queue_bytes", "Bytes of the events queued for the store's writer or being written, by session.", typeGauge, bytes...)
	e.add(ns+"write_queue_oldest_seconds", "How long the oldest event queued for the store's writer has waited, by session.", typeGauge, oldest...)
	e.add(ns+"write_queue_held_seconds_total", "Time a session's agent was held waiting for room in the store's write queue.", typeCounter, held...)
	e.add(ns+"write_queue_holds_total", "Times a session's events waited for room in the store's write queue.", typeCounter, holds...)
	e.add(ns+"write_queue_paced_seconds_total", "Time a slowed session's agent waited so that its events were taken at the slowed rate while other sessions were at work.", typeCounter, paced...)
	e.add(ns+"write_queue_slowed", "1 while a session's agent is held waiting for room in the store's write queue.", typeGauge, slowed...)
	e.add(ns+"agent_slowed_total", "Episodes in which a session's agent was slowed for sending faster than the store takes its events (agent.slowed).", typeCounter, episodes...)
}
