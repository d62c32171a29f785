package httpapi

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentpool/agentpool/pool"
)

// metricsNamespace prefixes every metric name.
const metricsNamespace = "agentpool"

// metrics holds the server's Prometheus registry: its own request and
// stream metrics, plus a collector that reads the pool's and the
// registry's state at every scrape.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	streams  prometheus.Gauge
	handler  http.Handler
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "http_requests_total",
		Help: "HTTP requests answered, by route pattern and status."}, []string{"route", "code"})
	m.streams = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "sse_streams", Help: "Event streams open now."})
	m.reg.MustRegister(m.requests, m.streams, poolCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: slogErrorLog{s}})
	return m
}

// request counts one answered request.
func (m *metrics) request(route string, status int) {
	if status == 0 {
		status = http.StatusOK
	}
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
}

// serveMetrics: GET /metrics in the Prometheus exposition format: warm
// backends by provider and state, sessions, providers by status, turns,
// turn errors, the turn duration histogram, spawns, crashes, evictions,
// permission waits (count and histogram), events appended, dropped
// subscribers, subscriber catch-ups from the store, open streams, HTTP
// requests, and the Go runtime.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

type slogErrorLog struct{ s *Server }

func (l slogErrorLog) Println(v ...any) { l.s.log.Error("metrics", "err", v) }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "", name), help, labels, nil)
}

var (
	descBackends        = desc("backends", "Warm backends, by provider and state.", "provider", "state")
	descSessions        = desc("sessions_loaded", "Sessions loaded in the pool.")
	descProviders       = desc("providers", "Providers, by status.", "status")
	descTurns           = desc("turns_total", "Turns started.")
	descTurnErrors      = desc("turn_errors_total", "Turns that ended with an error.")
	descTurnDuration    = desc("turn_duration_seconds", "Duration of turns.")
	descSpawns          = desc("spawns_total", "Agent processes started.")
	descCrashes         = desc("crashes_total", "Agent processes that ended unexpectedly or failed to start.")
	descEvictions       = desc("evictions_total", "Backends stopped to make room or because they idled.")
	descPermWaits       = desc("permission_waits_total", "Permission requests that waited for a person.")
	descPermWaitSeconds = desc("permission_wait_seconds", "Time permission requests waited for an answer.")
	descEvents          = desc("events_appended_total", "Events appended to session logs.")
	descDropped         = desc("subscribers_dropped_total", "Daemon-wide event subscribers dropped for falling behind.")
	descCatchups        = desc("subscriber_catchups_total", "Reads of the event store by session subscribers behind the in-memory ring.")
	descBuild           = desc("build_info", "The daemon's version.", "version")
)

// poolCollector reads the pool's Stats and the registry's snapshot at
// every scrape, so the numbers are never stale and nothing is copied twice.
type poolCollector struct{ s *Server }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBackends, descSessions, descProviders, descTurns, descTurnErrors, descTurnDuration,
		descSpawns, descCrashes, descEvictions, descPermWaits, descPermWaitSeconds, descEvents, descDropped, descCatchups, descBuild} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.pool.Stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	for provider, states := range st.Warm {
		for state, n := range states {
			gauge(descBackends, float64(n), provider, state)
		}
	}
	gauge(descSessions, float64(st.Sessions))
	byStatus := map[string]int{}
	for _, p := range c.s.reg.Snapshot().Providers {
		byStatus[p.Status]++
	}
	for status, n := range byStatus {
		gauge(descProviders, float64(n), status)
	}
	counter(descTurns, st.Turns)
	counter(descTurnErrors, st.TurnErrors)
	ch <- histogram(descTurnDuration, st.TurnDurations)
	counter(descSpawns, st.Spawns)
	counter(descCrashes, st.Crashes)
	counter(descEvictions, st.Evictions)
	counter(descPermWaits, st.PermissionWaits)
	ch <- histogram(descPermWaitSeconds, st.PermissionWaitsS)
	counter(descEvents, st.EventsPublished)
	counter(descDropped, st.SubscribersDrop)
	counter(descCatchups, st.SubscriberCatchups)
	gauge(descBuild, 1, c.s.cfg.Version)
}

// histogram turns the pool's cumulative histogram into a Prometheus one.
func histogram(d *prometheus.Desc, h pool.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		if i < len(h.Counts) {
			buckets[b] = h.Counts[i]
		}
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets)
}
