package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// Event types the server adds to the pool's on its streams.
const (
	// EventStreamEnd is the last event of a stream; its data is an
	// EndData saying why, and whether reconnecting makes sense.
	EventStreamEnd backends.EventType = "stream.end"
	// EventProviderChanged carries a registry.Change on the daemon-wide stream.
	EventProviderChanged backends.EventType = "provider.changed"
	// EventPoolStatus opens the daemon-wide stream with a PoolStatus.
	EventPoolStatus backends.EventType = "pool.status"
	// EventCreateResult opens the stream of POST /v1/sessions asked for
	// as text/event-stream: its data is the CreatedSession the JSON
	// answer would be, and the session's own events follow.
	EventCreateResult backends.EventType = "create.result"
)

// Reasons a stream ends, the Reason of EndData.
const (
	// EndDropped: the subscription was dropped (it fell behind); reconnect
	// with Last-Event-ID.
	EndDropped = "dropped"
	// EndClosed: the session was closed; nothing more will come.
	EndClosed = "closed"
	// EndShutdown: the daemon is shutting down.
	EndShutdown = "shutdown"
	// EndBacklog: the stream was asked for the stored events only
	// (?follow=false) and has sent them all.
	EndBacklog = "backlog"
)

// sseRetryMillis is the reconnection delay suggested to EventSource clients.
const sseRetryMillis = 1000

// maxBatch bounds the events written to a stream between two flushes.
const maxBatch = 256

// EndData is the payload of the stream.end event.
type EndData struct {
	Reason string `json:"reason"`
	// LastSeq is the seq of the last event sent, for Last-Event-ID.
	LastSeq int64 `json:"last_seq,omitempty"`
}

// sseWriter writes one event stream. Writes are buffered; flush sends them,
// each flush bounded by the write timeout.
type sseWriter struct {
	w       *bufio.Writer
	rc      *http.ResponseController
	timeout time.Duration
	err     error
}

// holdStream registers a long request (a stream, a terminal, a forward)
// that Shutdown waits for and ends, or refuses it during shutdown; the
// caller calls s.streams.Done when it ends.
func (s *Server) holdStream() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errShuttingDown
	}
	s.streams.Add(1)
	return nil
}

// startStream refuses a stream during shutdown, else sends the headers and
// registers the stream; the returned function unregisters it.
func (s *Server) startStream(w http.ResponseWriter) (*sseWriter, func(), error) {
	return s.startStreamStatus(w, http.StatusOK)
}

// startStreamStatus is startStream answering with status (201 for a
// session created with its stream).
func (s *Server) startStreamStatus(w http.ResponseWriter, status int) (*sseWriter, func(), error) {
	if err := s.holdStream(); err != nil {
		return nil, nil, err
	}
	s.metrics.streams.Inc()
	rc := http.NewResponseController(w)
	done := func() {
		// The connection may serve further requests: no deadline of ours stays.
		_ = rc.SetWriteDeadline(time.Time{})
		s.metrics.streams.Dec()
		s.streams.Done()
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(status)
	sw := &sseWriter{w: bufio.NewWriterSize(w, 32<<10), rc: rc, timeout: s.cfg.WriteTimeout}
	sw.line("retry: " + seqString(sseRetryMillis))
	sw.line("")
	sw.flush()
	return sw, done, sw.err
}

func (sw *sseWriter) line(s string) {
	if sw.err == nil {
		_, sw.err = sw.w.WriteString(s + "\n")
	}
}

// event writes ev; withID sets the id line to its seq.
func (sw *sseWriter) event(ev backends.Event, withID bool) {
	head, data, err := eventParts(ev)
	if err != nil {
		head, _ = json.Marshal(backends.Event{Seq: ev.Seq, Session: ev.Session, Time: ev.Time, Type: backends.EventError,
			Data: backends.MustJSON(map[string]string{"error": "encode event: " + err.Error()})})
		data = nil
	}
	if withID && ev.Seq > 0 {
		sw.line("id: " + seqString(ev.Seq))
	}
	sw.line("event: " + string(ev.Type))
	if data == nil {
		sw.data(head)
	} else {
		sw.data(head, data, []byte{'}'})
	}
	sw.line("")
}

// encodeEvent returns ev as JSON on one line (see eventParts).
func encodeEvent(ev backends.Event) ([]byte, error) {
	head, data, err := eventParts(ev)
	if err != nil || data == nil {
		return head, err
	}
	out := make([]byte, 0, len(head)+len(data)+1)
	out = append(append(out, head...), data...)
	return append(out, '}'), nil
}

// eventParts returns ev as JSON on one line, as json.Marshal would but
// without compacting (scanning and copying) its Data again: either head
// alone (data nil), or head, data and a closing brace. The events' Data
// are valid JSON by construction (an agent's update is cut out of a line
// the backend has decoded, the others are marshalled), and a line of the
// agent's cannot hold a line break. Data with a CR or LF in it (JSON
// whitespace from elsewhere) is compacted, as an SSE data line needs.
func eventParts(ev backends.Event) (head, data []byte, err error) {
	data = ev.Data
	if len(data) == 0 || bytes.IndexByte(data, '\n') >= 0 || bytes.IndexByte(data, '\r') >= 0 {
		head, err = json.Marshal(ev)
		return head, nil, err
	}
	ev.Data = nil
	if head, err = json.Marshal(ev); err != nil {
		return nil, nil, err
	}
	// Data is the struct's last field: it goes before the closing brace.
	return append(head[:len(head)-1], `,"data":`...), data, nil
}

// data writes the data line of a JSON event given in parts, without
// copying them: a big update costs the stream its envelope alone.
func (sw *sseWriter) data(parts ...[]byte) {
	if sw.err == nil {
		_, sw.err = sw.w.WriteString("data: ")
	}
	for _, b := range parts {
		if sw.err == nil {
			_, sw.err = sw.w.Write(b)
		}
	}
	if sw.err == nil {
		sw.err = sw.w.WriteByte('\n')
	}
}

// comment writes a comment line, which clients ignore: a heartbeat.
func (sw *sseWriter) comment(text string) {
	sw.line(": " + text)
	sw.line("")
}

// end writes the final stream.end event.
func (sw *sseWriter) end(reason string, last int64) {
	sw.event(backends.Event{Time: time.Now(), Type: EventStreamEnd, Data: backends.MustJSON(EndData{Reason: reason, LastSeq: last})}, false)
	sw.flush()
}

// renew gives the writes of a batch about to start the write timeout,
// for those that overflow the buffer before the flush.
func (sw *sseWriter) renew() {
	if sw.err == nil {
		_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
	}
}

// flush sends what is buffered, within the write timeout.
func (sw *sseWriter) flush() {
	if sw.err != nil {
		return
	}
	_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
	if sw.err = sw.w.Flush(); sw.err == nil {
		sw.err = sw.rc.Flush()
	}
}

// afterOf reads where a session stream resumes: Last-Event-ID (a
// reconnecting EventSource) wins over ?after=.
func afterOf(r *http.Request) (int64, error) {
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		return parseSeq("Last-Event-ID", v)
	}
	return intParam(r, "after")
}

// sessionEvents: GET /v1/sessions/{id}/events, a server-sent event stream:
// id = seq, event = type, data = the JSON event. It replays the stored
// events after Last-Event-ID (or ?after=), then follows live ones (unless
// ?follow=false), with heartbeats, and ends with a stream.end event.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request) error {
	after, err := afterOf(r)
	if err != nil {
		return err
	}
	follow := true
	if r.URL.Query().Has("follow") {
		if follow, err = boolParam(r, "follow"); err != nil {
			return err
		}
	}
	ctx, cancel := s.longContext(r)
	defer cancel()
	sub, err := s.pool.Subscribe(ctx, r.PathValue("id"), after)
	if err != nil {
		return s.shutdownErr(err)
	}
	defer sub.Close()
	sw, done, err := s.startStream(w)
	if done != nil {
		defer done()
	}
	if err != nil {
		return err
	}
	last := after
	// write sends a batch, never an event already sent (whatever the
	// source does) nor one after until (if set), then flushes it.
	write := func(evs []backends.Event, until int64) {
		sw.renew()
		for _, ev := range evs {
			if ev.Seq > last && (until == 0 || ev.Seq <= until) {
				sw.event(ev, true)
				last = ev.Seq
			}
		}
		sw.flush()
	}
	if !follow {
		// The events up to the newest one when the request came.
		head := sub.Head()
		for done := last >= head; !done && sw.err == nil; {
			evs, err := sub.Next(ctx, maxBatch)
			if err != nil {
				s.endStream(ctx, sw, err, last)
				return nil
			}
			write(evs, head)
			done = evs[len(evs)-1].Seq >= head
		}
		sw.end(EndBacklog, last)
		return nil
	}
	s.followStream(ctx, sw, sub, last)
	return nil
}

// followStream writes sub's events after seq last to sw as they come,
// each once and in order, with heartbeats, until the client goes, the
// server shuts down or the subscription ends (stream.end says why).
func (s *Server) followStream(ctx context.Context, sw *sseWriter, sub *pool.Subscription, last int64) {
	write := func(evs []backends.Event) {
		sw.renew()
		for _, ev := range evs {
			if ev.Seq > last {
				sw.event(ev, true)
				last = ev.Seq
			}
		}
		sw.flush()
	}
	hb := time.NewTicker(s.cfg.Heartbeat)
	defer hb.Stop()
	for sw.err == nil {
		select {
		case <-ctx.Done():
			if s.base.Err() != nil {
				sw.end(EndShutdown, last)
			}
			return
		case <-hb.C:
			sw.comment("ping")
			sw.flush()
		case <-sub.Ready():
			evs, err := sub.Next(ctx, maxBatch)
			if err != nil {
				s.endStream(ctx, sw, err, last)
				return
			}
			write(evs)
		}
	}
}

// endStream ends a stream whose subscription's Next failed with err: the
// server shutting down, the subscription ending (stream.end says why), or
// the client gone (nothing more to write). last is the last seq sent.
func (s *Server) endStream(ctx context.Context, sw *sseWriter, err error, last int64) {
	switch {
	case s.base.Err() != nil:
		sw.end(EndShutdown, last)
	case ctx.Err() != nil:
	default:
		sw.end(endReason(err), last)
	}
}

// endReason names why a subscription ended.
func endReason(err error) string {
	if errors.Is(err, pool.ErrClosed) {
		return EndClosed
	}
	return EndDropped
}
