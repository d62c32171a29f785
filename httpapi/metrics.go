package httpapi

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentpool/agentpool/pool"
)

// metricsNamespace prefixes every metric name.
const metricsNamespace = "agentpool_"

// metricsContentType is the Prometheus text exposition format.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// metrics holds the server's own counters; the pool's come from its Stats
// at every scrape.
type metrics struct {
	streams atomic.Int64

	mu       sync.Mutex
	requests map[requestKey]uint64
}

// requestKey labels one request counter.
type requestKey struct {
	route string
	code  int
}

func newMetrics() *metrics {
	return &metrics{requests: map[requestKey]uint64{}}
}

// request counts one answered request.
func (m *metrics) request(route string, status int) {
	if status == 0 {
		status = http.StatusOK
	}
	if route == "" {
		route = "unmatched"
	}
	m.mu.Lock()
	m.requests[requestKey{route, status}]++
	m.mu.Unlock()
}

// serveMetrics: GET /metrics in the Prometheus text exposition format:
// warm backends by provider and state, sessions, providers by status,
// turns, turn errors, the turn duration histogram, spawns, crashes,
// evictions, permission waits (count and histogram), events appended,
// dropped subscribers, open streams and HTTP requests.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	var b bytes.Buffer
	p := promWriter{&b}
	st := s.pool.Stats()

	p.family("backends", "gauge", "Warm backends, by provider and state.")
	for _, provider := range slices.Sorted(maps.Keys(st.Warm)) {
		states := st.Warm[provider]
		for _, state := range slices.Sorted(maps.Keys(states)) {
			p.sample("backends", float64(states[state]), "provider", provider, "state", state)
		}
	}
	p.single("sessions_loaded", "gauge", "Sessions loaded in the pool.", float64(st.Sessions))
	byStatus := map[string]int{}
	for _, pr := range s.reg.Snapshot().Providers {
		byStatus[pr.Status]++
	}
	p.family("providers", "gauge", "Providers, by status.")
	for _, status := range slices.Sorted(maps.Keys(byStatus)) {
		p.sample("providers", float64(byStatus[status]), "status", status)
	}
	p.single("turns_total", "counter", "Turns started.", float64(st.Turns))
	p.single("turn_errors_total", "counter", "Turns that ended with an error.", float64(st.TurnErrors))
	p.histogram("turn_duration_seconds", "Duration of turns.", st.TurnDurations)
	p.single("spawns_total", "counter", "Agent processes started.", float64(st.Spawns))
	p.single("crashes_total", "counter", "Agent processes that ended unexpectedly or failed to start.", float64(st.Crashes))
	p.single("evictions_total", "counter", "Backends stopped to make room or because they idled.", float64(st.Evictions))
	p.single("permission_waits_total", "counter", "Permission requests that waited for a person.", float64(st.PermissionWaits))
	p.histogram("permission_wait_seconds", "Time permission requests waited for an answer.", st.PermissionWaitsS)
	p.single("events_appended_total", "counter", "Events appended to session logs.", float64(st.EventsPublished))
	p.single("subscribers_dropped_total", "counter", "Event subscribers dropped for falling behind.", float64(st.SubscribersDrop))
	p.single("sse_streams", "gauge", "Event streams open now.", float64(s.metrics.streams.Load()))
	p.single("goroutines", "gauge", "Goroutines of the daemon.", float64(runtime.NumGoroutine()))
	p.family("build_info", "gauge", "The daemon's version.")
	p.sample("build_info", 1, "version", s.cfg.Version)

	s.metrics.mu.Lock()
	reqs := maps.Clone(s.metrics.requests)
	s.metrics.mu.Unlock()
	p.family("http_requests_total", "counter", "HTTP requests answered, by route pattern and status.")
	for _, k := range slices.SortedFunc(maps.Keys(reqs), func(a, b requestKey) int {
		return cmp.Or(strings.Compare(a.route, b.route), a.code-b.code)
	}) {
		p.sample("http_requests_total", float64(reqs[k]), "route", k.route, "code", strconv.Itoa(k.code))
	}

	w.Header().Set("Content-Type", metricsContentType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
	return nil
}

// promWriter writes the text exposition format.
type promWriter struct{ b *bytes.Buffer }

// family writes the HELP and TYPE lines of a metric family.
func (p promWriter) family(name, typ, help string) {
	fmt.Fprintf(p.b, "# HELP %s%s %s\n# TYPE %s%s %s\n", metricsNamespace, name, help, metricsNamespace, name, typ)
}

// single writes a family of one unlabelled sample.
func (p promWriter) single(name, typ, help string, v float64) {
	p.family(name, typ, help)
	p.sample(name, v)
}

// sample writes one sample; labels are name, value pairs.
func (p promWriter) sample(name string, v float64, labels ...string) {
	p.b.WriteString(metricsNamespace + name)
	if len(labels) > 0 {
		p.b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				p.b.WriteByte(',')
			}
			p.b.WriteString(labels[i] + `="` + escapeLabel(labels[i+1]) + `"`)
		}
		p.b.WriteByte('}')
	}
	p.b.WriteString(" " + formatFloat(v) + "\n")
}

// histogram writes a pool histogram (cumulative counts per upper bound).
func (p promWriter) histogram(name, help string, h pool.Histogram) {
	p.family(name, "histogram", help)
	for i, bound := range h.Bounds {
		if i < len(h.Counts) {
			p.sample(name+"_bucket", float64(h.Counts[i]), "le", formatFloat(bound))
		}
	}
	p.sample(name+"_bucket", float64(h.Count), "le", "+Inf")
	p.sample(name+"_sum", h.Sum)
	p.sample(name+"_count", float64(h.Count))
}

// escapeLabel escapes a label value: backslash, double quote, newline.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// formatFloat formats a sample value as Prometheus expects.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
