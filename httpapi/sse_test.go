package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// sseMsg is one event as a test reads it off the wire.
type sseMsg struct {
	id, event, data string
	comment         bool
}

// sseConn is a raw event stream, read with a parser independent of the
// Client's.
type sseConn struct {
	resp   *http.Response
	sc     *bufio.Scanner
	cancel context.CancelFunc
}

func openSSE(t *testing.T, e *testEnv, path string, header map[string]string) *sseConn {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.ts.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s error = %v", path, err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		cancel()
		t.Fatalf("GET %s = %d %q; want 200 text/event-stream", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	c := &sseConn{resp: resp, sc: sc, cancel: cancel}
	t.Cleanup(c.close)
	return c
}

func (c *sseConn) close() {
	c.cancel()
	c.resp.Body.Close()
}

// next returns the next event or comment; ok is false at the end.
func (c *sseConn) next() (m sseMsg, ok bool) {
	seen := false
	for c.sc.Scan() {
		line := c.sc.Text()
		if line == "" {
			if seen {
				return m, true
			}
			continue
		}
		seen = true
		switch {
		case strings.HasPrefix(line, ":"):
			m.comment = true
		case strings.HasPrefix(line, "id: "):
			m.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			m.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			m.data = line[6:]
		case strings.HasPrefix(line, "retry: "):
			seen = false
		}
	}
	return m, false
}

// nextEvent skips comments and returns the next event.
func (c *sseConn) nextEvent(t *testing.T) sseMsg {
	t.Helper()
	for {
		m, ok := c.next()
		if !ok {
			t.Fatalf("event stream ended early")
		}
		if !m.comment {
			return m
		}
	}
}

// streamWorld gives fp one session "s1" backed by log; the function it
// returns lists the `after` of every Subscribe so far.
func streamWorld(fp *fakePool, log *eventLog) func() []int64 {
	var mu sync.Mutex
	var afters []int64
	fp.SubscribeFunc = func(_ context.Context, id string, after int64) (*pool.Subscription, error) {
		if id != "s1" {
			return nil, fmt.Errorf("session %q: %w", id, pool.ErrNotFound)
		}
		mu.Lock()
		afters = append(afters, after)
		mu.Unlock()
		return log.Subscribe(after), nil
	}
	return func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(afters)
	}
}

func TestSSEReconnectWithLastEventID(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	log := newLog(t, 1024)
	streamWorld(fp, log)
	e := newTestEnv(t, fp, nil)
	const total = 60
	log.Publish("s1", backends.EventTurnStarted, 1, map[string]any{"turn": 1})
	for range 4 {
		log.Publish("s1", backends.EventMessageChunk, 1, backends.ChunkData{Role: "agent", Text: "stored "})
	}

	var got []int64
	read := func(c *sseConn, until int64) {
		for {
			m := c.nextEvent(t)
			if m.event == string(EventStreamEnd) {
				t.Fatalf("stream ended early: %s", m.data)
			}
			var ev backends.Event
			if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
				t.Fatalf("event data %q: %v", m.data, err)
			}
			if m.id != strconv.FormatInt(ev.Seq, 10) || m.event != string(ev.Type) {
				t.Fatalf("event id %q type %q; want the seq %d and type %q of its data", m.id, m.event, ev.Seq, ev.Type)
			}
			got = append(got, ev.Seq)
			if ev.Seq >= until {
				return
			}
		}
	}

	// Connect, read the stored events and some live ones mid-turn.
	c := openSSE(t, e, "/v1/sessions/s1/events", nil)
	read(c, 5)
	for range 15 {
		log.Publish("s1", backends.EventMessageChunk, 1, backends.ChunkData{Role: "agent", Text: "live "})
	}
	read(c, 12)
	// Disconnect mid-turn: events go on while no one listens.
	c.close()
	for range 10 {
		log.Publish("s1", backends.EventMessageChunk, 1, backends.ChunkData{Role: "thought", Text: "while away "})
	}
	// Reconnect from the last event seen, as EventSource does.
	c = openSSE(t, e, "/v1/sessions/s1/events", map[string]string{"Last-Event-ID": strconv.FormatInt(got[len(got)-1], 10)})
	go func() {
		for int64(log.Len()) < total-1 {
			log.Publish("s1", backends.EventMessageChunk, 1, backends.ChunkData{Role: "agent", Text: "more "})
		}
		log.Publish("s1", backends.EventTurnEnded, 1, map[string]any{"stop_reason": "end_turn"})
	}()
	read(c, int64(total))
	want := make([]int64, total)
	for i := range want {
		want[i] = int64(i + 1)
	}
	if !slices.Equal(got, want) {
		t.Errorf("seqs received across the reconnection = %v; want 1..%d, each exactly once", got, total)
	}
}

func TestClientEventsSurviveDrops(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	log := newLog(t, 1024)
	afters := streamWorld(fp, log)
	e := newTestEnv(t, fp, nil)
	const total = 300
	var got []int64
	done := make(chan error, 1)
	go func() {
		done <- e.client.Events(t.Context(), "s1", 0, func(ev backends.Event) error {
			got = append(got, ev.Seq)
			if ev.Type == backends.EventTurnEnded {
				return ErrStop
			}
			return nil
		})
	}()
	subscribed := func(n int) {
		waitFor(t, fmt.Sprintf("subscription %d", n), func() bool { return len(afters()) >= n })
	}
	subscribed(1)
	for i := 1; i <= total; i++ {
		typ := backends.EventMessageChunk
		if i == total {
			typ = backends.EventTurnEnded
		}
		log.Publish("s1", typ, 1, map[string]int{"i": i})
		switch i {
		case 50:
			log.DropAll() // the subscription ends with ErrSlowSubscriber: a clean stream.end "dropped"
			subscribed(2)
		case 120:
			log.DropAll()
			subscribed(3)
		case 200:
			e.ts.CloseClientConnections() // the connection breaks
			subscribed(4)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Events() error = %v; want nil after ErrStop", err)
	}
	want := make([]int64, total)
	for i := range want {
		want[i] = int64(i + 1)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Events delivered %d events %v; want 1..%d each exactly once", len(got), got, total)
	}
	if a := afters(); len(a) != 4 || a[0] != 0 || a[1] == 0 || a[1] > 50 || a[2] < a[1] || a[2] > 120 || a[3] < a[2] || a[3] > 200 {
		t.Errorf("Subscribe afters = %v; want 0, then three reconnections from the last seq delivered", a)
	}
}

func TestSSEBacklogOnly(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	log := newLog(t, 16)
	streamWorld(fp, log)
	e := newTestEnv(t, fp, nil)
	for i := range 5 {
		log.Publish("s1", backends.EventMessageChunk, 1, map[string]int{"i": i})
	}
	evs, err := e.client.EventLog(t.Context(), "s1", 2)
	var seqs []int64
	for _, ev := range evs {
		seqs = append(seqs, ev.Seq)
	}
	if err != nil || !slices.Equal(seqs, []int64{3, 4, 5}) {
		t.Errorf("EventLog(s1, 2) = %v, %v; want seqs [3 4 5]", seqs, err)
	}
	c := openSSE(t, e, "/v1/sessions/s1/events?follow=false&after=4", nil)
	if m := c.nextEvent(t); m.id != "5" {
		t.Errorf("first event id = %q; want 5", m.id)
	}
	if m := c.nextEvent(t); m.event != string(EventStreamEnd) || !strings.Contains(m.data, `"reason":"backlog"`) || m.id != "" {
		t.Errorf("last event = %+v; want stream.end with reason backlog and no id", m)
	}
}

// A stream that starts further back than the log's ring replays the rest
// from the log itself, in batches, with no gap.
func TestSSEReplayBehindRing(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	log := newLog(t, 8)
	streamWorld(fp, log)
	e := newTestEnv(t, fp, nil)
	const total = 700 // more than one batch
	for i := range total {
		log.Publish("s1", backends.EventMessageChunk, 1, map[string]int{"i": i})
	}
	evs, err := e.client.EventLog(t.Context(), "s1", 3)
	if err != nil || len(evs) != total-3 {
		t.Fatalf("EventLog(s1, 3) = %d events, %v; want %d", len(evs), err, total-3)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+4) {
			t.Fatalf("event %d has seq %d; want %d", i, ev.Seq, i+4)
		}
	}
}

// The metrics carry the pool's subscriber counters.
func TestMetricsSubscriberCounters(t *testing.T) {
	fp := &fakePool{StatsFunc: func() pool.Stats { return pool.Stats{SubscribersDrop: 2, SubscriberCatchups: 7} }}
	e := newTestEnv(t, fp, nil)
	_, _, body := e.send(t, apiCall{method: "GET", path: "/metrics"})
	for _, want := range []string{"agentpool_subscribers_dropped_total 2", "agentpool_subscriber_catchups_total 7"} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
}

func TestSSEErrors(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	streamWorld(fp, newLog(t, 16))
	e := newTestEnv(t, fp, nil)
	e.check(t, []apiCall{
		{name: "missing session", method: "GET", path: "/v1/sessions/missing/events", status: 404, code: CodeNotFound},
		{name: "bad Last-Event-ID", method: "GET", path: "/v1/sessions/s1/events", header: map[string]string{"Last-Event-ID": "x"}, status: 400, code: CodeBadRequest, field: "Last-Event-ID"},
		{name: "bad after", method: "GET", path: "/v1/sessions/s1/events?after=-3", status: 400, code: CodeBadRequest, field: "after"},
		{name: "bad follow", method: "GET", path: "/v1/sessions/s1/events?follow=sometimes", status: 400, code: CodeBadRequest, field: "follow"},
	})
	err := e.client.Events(t.Context(), "missing", 0, func(backends.Event) error { return nil })
	if !IsCode(err, CodeNotFound) {
		t.Errorf("Events(missing) error = %v; want not_found", err)
	}
}

func TestSSEHeartbeat(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	streamWorld(fp, newLog(t, 16))
	e := newTestEnv(t, fp, func(c *Config) { c.Heartbeat = 5 * time.Millisecond })
	c := openSSE(t, e, "/v1/sessions/s1/events", nil)
	for range 3 {
		if m, ok := c.next(); !ok || !m.comment {
			t.Fatalf("message on an idle stream = %+v, %v; want a heartbeat comment", m, ok)
		}
	}
}

func TestSSEEndsOnShutdown(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	log := newLog(t, 16)
	streamWorld(fp, log)
	e := newTestEnv(t, fp, nil)
	log.Publish("s1", backends.EventTurnStarted, 1, nil)
	done := make(chan error, 1)
	first := make(chan struct{})
	go func() {
		done <- e.client.Events(t.Context(), "s1", 0, func(ev backends.Event) error {
			if ev.Seq == 1 {
				close(first)
			}
			return nil
		})
	}()
	<-first
	e.srv.Shutdown() // returns once every stream has ended
	if err := <-done; !errors.Is(err, ErrShutdown) {
		t.Errorf("Events() after Shutdown error = %v; want ErrShutdown", err)
	}
	status, _, body := e.send(t, apiCall{method: "GET", path: "/v1/sessions/s1/events"})
	if status != 503 || !strings.Contains(body, CodeShuttingDown) {
		t.Errorf("new stream after Shutdown = %d %s; want 503 shutting_down", status, body)
	}
	e.srv.Shutdown() // idempotent
}

func TestSSEEndsWhenSessionCloses(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	log, src := newLogSrc(t, 16)
	streamWorld(fp, log)
	e := newTestEnv(t, fp, nil)
	log.Publish("s1", backends.EventTurnStarted, 1, nil)
	var n int
	done := make(chan error, 1)
	go func() {
		done <- e.client.Events(t.Context(), "s1", 0, func(backends.Event) error { n++; return nil })
	}()
	waitFor(t, "a subscriber", func() bool { return log.Subscribers() == 1 })
	// The pool ends its subscriptions with ErrClosed after their events.
	if err := src.EndAll(t.Context()); err != nil {
		t.Fatalf("pool Shutdown() error = %v", err)
	}
	if err := <-done; err != nil || n != 1 {
		t.Errorf("Events() on a closed session = %v after %d events; want nil after 1", err, n)
	}
}

func TestDaemonEvents(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	global := newLog(t, 64)
	fp.SubscribeAllFunc = func() *pool.Subscription { return global.Subscribe(0) }
	e := newTestEnv(t, fp, nil)
	var types []string
	err := e.client.DaemonEvents(t.Context(), func(ev backends.Event) error {
		types = append(types, string(ev.Type))
		switch ev.Type {
		case EventPoolStatus:
			var ps PoolStatus
			if err := json.Unmarshal(ev.Data, &ps); err != nil || len(ps.Backends) != 1 {
				return fmt.Errorf("pool.status data %s: %v", ev.Data, err)
			}
			global.Publish("s9", backends.EventSessionCreated, 0, nil)
		case backends.EventSessionCreated:
			if _, err := e.client.SetProviderEnabled(t.Context(), "gemini", false); err != nil {
				return err
			}
		case EventProviderChanged:
			if !strings.Contains(string(ev.Data), `"disabled":["gemini"]`) {
				return fmt.Errorf("provider.changed data = %s; want gemini disabled", ev.Data)
			}
			return ErrStop
		}
		return nil
	})
	want := []string{string(EventPoolStatus), string(backends.EventSessionCreated), string(EventProviderChanged)}
	if err != nil || !slices.Equal(types, want) {
		t.Errorf("DaemonEvents() saw %v, %v; want %v", types, err, want)
	}
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestLastEventIDWinsOverAfter(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	log := newLog(t, 16)
	afters := streamWorld(fp, log)
	e := newTestEnv(t, fp, nil)
	for range 5 {
		log.Publish("s1", backends.EventMessageChunk, 1, nil)
	}
	c := openSSE(t, e, "/v1/sessions/s1/events?after=1&follow=false", map[string]string{"Last-Event-ID": "4"})
	if m := c.nextEvent(t); m.id != "5" {
		t.Errorf("first event id with Last-Event-ID 4 and after=1 = %q; want 5", m.id)
	}
	if a := afters(); !slices.Equal(a, []int64{4}) {
		t.Errorf("Subscribe afters = %v; want [4]", a)
	}
}

func TestShutdownEndsWaits(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	waiting := make(chan struct{})
	fp.WaitTurnFunc = func(ctx context.Context, id string, turn int64) (pool.Turn, error) {
		close(waiting)
		<-ctx.Done()
		return pool.Turn{}, ctx.Err()
	}
	e := newTestEnv(t, fp, nil)
	done := make(chan error, 1)
	go func() {
		_, err := e.client.Prompt(t.Context(), "s1", "", "hi", true)
		done <- err
	}()
	<-waiting
	e.srv.Shutdown()
	if err := <-done; !IsCode(err, CodeShuttingDown) {
		t.Errorf("Prompt(wait) during Shutdown error = %v; want shutting_down", err)
	}
}
