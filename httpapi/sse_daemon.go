package httpapi

import (
	"net/http"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// daemonEvents: GET /v1/events, the daemon-wide stream. It opens with a
// pool.status event (a PoolStatus), then carries the pool's session.*,
// agent.*, turn.started/ended and permission.* events of every session and
// the registry's changes as provider.changed events. It has no replay, so
// its events carry no id; it ends with stream.end, "dropped" when either
// source dropped it (reconnect), "shutdown" at Shutdown.
func (s *Server) daemonEvents(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := s.longContext(r)
	defer cancel()
	sub := s.pool.SubscribeAll()
	defer sub.Close()
	_, changes, unsubscribe := s.reg.Subscribe()
	defer unsubscribe()
	sw, done, err := s.startStream(w)
	if done != nil {
		defer done()
	}
	if err != nil {
		return err
	}
	b := s.pool.Backends()
	if b == nil {
		b = []pool.AgentStatus{}
	}
	sw.event(backends.Event{Time: time.Now(), Type: EventPoolStatus, Data: backends.MustJSON(PoolStatus{Backends: b, Stats: s.pool.Stats()})}, false)
	sw.flush()
	hb := time.NewTicker(s.cfg.Heartbeat)
	defer hb.Stop()
	for sw.err == nil {
		select {
		case <-ctx.Done():
			if s.base.Err() != nil {
				sw.end(EndShutdown, 0)
			}
			return nil
		case <-hb.C:
			sw.comment("ping")
			sw.flush()
		case <-sub.Ready():
			evs, err := sub.Next(ctx, maxBatch)
			if err != nil {
				s.endStream(ctx, sw, err, 0)
				return nil
			}
			sw.renew()
			for _, ev := range evs {
				sw.event(ev, false)
			}
			sw.flush()
		case c, ok := <-changes:
			if !ok {
				sw.end(EndDropped, 0)
				return nil
			}
			sw.event(backends.Event{Time: time.Now(), Type: EventProviderChanged, Data: backends.MustJSON(c)}, false)
			sw.flush()
		}
	}
	return nil
}
