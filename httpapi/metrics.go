package httpapi

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/agentpool/agentpool/pool"
)

// The server's own metrics are written by hand in the text exposition
// format (metrics_text.go) rather than through client_golang: the
// agentpool binary is also the per-agent launcher, and client_golang's
// package init alone cost it about 2.5 ms of every agent start.

// metricsNamespace prefixes every metric name of the server and the pool.
const metricsNamespace = "agentpool_"

// metrics holds the server's own request and stream metrics. The pool's
// and the registry's numbers are read at every scrape instead, so they
// are never stale and nothing is copied twice.
type metrics struct {
	requests requestCounter
	streams  streamGauge
}

// newMetrics returns the metrics of a Server; the server itself is read
// at each scrape, not here.
func newMetrics(*Server) *metrics {
	return &metrics{requests: requestCounter{n: map[requestKey]uint64{}}}
}

// request counts one answered request.
func (m *metrics) request(route string, status int) {
	if status == 0 {
		status = http.StatusOK
	}
	if route == "" {
		route = "unmatched"
	}
	m.requests.inc(requestKey{route: route, code: status})
}

// requestKey is one series of agentpool_http_requests_total.
type requestKey struct {
	route string
	code  int
}

// requestCounter counts answered requests by route and status. It is
// safe for concurrent use; an increment is one map update under a mutex.
type requestCounter struct {
	mu sync.Mutex
	n  map[requestKey]uint64
}

func (c *requestCounter) inc(k requestKey) {
	c.mu.Lock()
	c.n[k]++
	c.mu.Unlock()
}

// series returns one series per route and status seen so far.
func (c *requestCounter) series() []series {
	c.mu.Lock()
	defer c.mu.Unlock()
	ss := make([]series, 0, len(c.n))
	for k, n := range c.n {
		ss = append(ss, series{labels: []label{{"code", strconv.Itoa(k.code)}, {"route", k.route}}, value: float64(n)})
	}
	return ss
}

// streamGauge counts the event streams open now. It is safe for
// concurrent use.
type streamGauge struct{ n atomic.Int64 }

// Inc counts a stream opened.
func (g *streamGauge) Inc() { g.n.Add(1) }

// Dec counts a stream closed.
func (g *streamGauge) Dec() { g.n.Add(-1) }

// serveMetrics: GET /metrics in the Prometheus text exposition format
// 0.0.4: warm backends by provider and state, sessions, providers by
// status, turns, turn errors, the turn duration histogram, spawns,
// crashes, evictions, permission waits (count and histogram), events
// appended, dropped subscribers, subscriber catch-ups from the store, open
// streams, HTTP requests, the Go runtime and the process.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	var e exposition
	s.collectPool(&e)
	s.collectUsage(r.Context(), &e) // usage.go
	e.add(metricsNamespace+"http_requests_total", "HTTP requests answered, by route pattern and status.", typeCounter, s.metrics.requests.series()...)
	e.gauge(metricsNamespace+"sse_streams", "Event streams open now.", float64(s.metrics.streams.n.Load()))
	s.collectConns(&e)
	s.collectMCPShares(&e)   // mcpshare.go
	s.collectWriteQueues(&e) // metrics_fair.go
	collectGo(&e)
	if err := collectProcess(&e); err != nil {
		// Served without the metrics it could not read, as client_golang does.
		s.log.Debug("process metrics", logKeyErr, err)
	}
	body := e.appendText(make([]byte, 0, 16<<10))
	w.Header().Set("Content-Type", contentTypeText)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if _, err := w.Write(body); err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	return nil
}

// collectPool adds the pool's Stats and the registry's providers.
func (s *Server) collectPool(e *exposition) {
	st := s.pool.Stats()
	const ns = metricsNamespace
	var warm []series
	for provider, states := range st.Warm {
		for state, n := range states {
			warm = append(warm, series{labels: []label{{"provider", provider}, {"state", state}}, value: float64(n)})
		}
	}
	e.add(ns+"backends", "Warm backends, by provider and state.", typeGauge, warm...)
	e.gauge(ns+"sessions_loaded", "Sessions loaded in the pool.", float64(st.Sessions))
	byStatus := map[string]int{}
	for _, p := range s.reg.Snapshot().Providers {
		byStatus[p.Status]++
	}
	var providers []series
	for status, n := range byStatus {
		providers = append(providers, series{labels: []label{{"status", status}}, value: float64(n)})
	}
	e.add(ns+"providers", "Providers, by status.", typeGauge, providers...)
	e.counter(ns+"turns_total", "Turns started.", float64(st.Turns))
	e.counter(ns+"turn_errors_total", "Turns that ended with an error.", float64(st.TurnErrors))
	e.counter(ns+"budget_cancels_total", "Turns cancelled because they crossed a budget.", float64(st.BudgetCancels))
	e.add(ns+"turn_duration_seconds", "Duration of turns.", typeHistogram, histogramSeries(st.TurnDurations))
	e.counter(ns+"spawns_total", "Agent processes started.", float64(st.Spawns))
	e.counter(ns+"crashes_total", "Agent processes that ended unexpectedly or failed to start.", float64(st.Crashes))
	e.counter(ns+"evictions_total", "Backends stopped to make room or because they idled.", float64(st.Evictions))
	e.counter(ns+"permission_waits_total", "Permission requests that waited for a person.", float64(st.PermissionWaits))
	e.add(ns+"permission_wait_seconds", "Time permission requests waited for an answer.", typeHistogram, histogramSeries(st.PermissionWaitsS))
	e.counter(ns+"events_appended_total", "Events appended to session logs.", float64(st.EventsPublished))
	e.counter(ns+"subscribers_dropped_total", "Daemon-wide event subscribers dropped for falling behind.", float64(st.SubscribersDrop))
	e.counter(ns+"subscriber_catchups_total", "Reads of the event store by session subscribers behind the in-memory ring.", float64(st.SubscriberCatchups))
	e.add(ns+"build_info", "The daemon's version.", typeGauge, series{labels: []label{{"version", s.cfg.Version}}, value: 1})
}

// histogramSeries turns the pool's cumulative histogram into a series,
// its buckets in ascending order of bound.
func histogramSeries(h pool.Histogram) series {
	pts := make([]point, 0, len(h.Bounds))
	for i, b := range h.Bounds {
		if i < len(h.Counts) {
			pts = append(pts, point{at: b, v: float64(h.Counts[i])})
		}
	}
	slices.SortFunc(pts, func(a, b point) int { return cmp.Compare(a.at, b.at) })
	return series{points: pts, count: h.Count, sum: h.Sum}
}
