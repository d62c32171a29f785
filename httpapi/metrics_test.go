package httpapi

import (
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agentpool/agentpool/pool"
)

func TestMetrics(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	e.send(t, apiCall{method: "GET", path: "/v1/sessions"})
	e.send(t, apiCall{method: "GET", path: "/v1/sessions/missing"})
	status, h, body := e.send(t, apiCall{method: "GET", path: "/metrics"})
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics = %d %q; want 200 in the text format", status, h.Get("Content-Type"))
	}
	for _, want := range []string{
		`agentpool_backends{provider="demo",state="busy"} 2`,
		`agentpool_backends{provider="demo",state="idle"} 1`,
		`agentpool_sessions_loaded 2`,
		`agentpool_turns_total 5`,
		`agentpool_turn_errors_total 1`,
		`# TYPE agentpool_turn_duration_seconds histogram`,
		`agentpool_turn_duration_seconds_bucket{le="1"} 2`,
		`agentpool_turn_duration_seconds_bucket{le="10"} 5`,
		`agentpool_turn_duration_seconds_bucket{le="+Inf"} 5`,
		`agentpool_turn_duration_seconds_sum 12.5`,
		`agentpool_turn_duration_seconds_count 5`,
		`agentpool_spawns_total 3`,
		`agentpool_crashes_total 1`,
		`agentpool_evictions_total 4`,
		`agentpool_permission_waits_total 6`,
		`agentpool_permission_wait_seconds_count 0`,
		`agentpool_events_appended_total 99`,
		`agentpool_providers{status="`,
		`agentpool_build_info{version="v-test"} 1`,
		`agentpool_http_requests_total{code="200",route="GET /v1/sessions"} 1`,
		`agentpool_http_requests_total{code="404",route="GET /v1/sessions/{id}"} 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
	// The whole body parses as the exposition format.
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("GET /metrics does not parse: %v", err)
	}
	if len(fams) < 15 {
		t.Errorf("GET /metrics has %d families", len(fams))
	}
}

// Label values and HELP texts are escaped so that the body parses back to
// the same strings, and series come out sorted by label values.
func TestExpositionEscaping(t *testing.T) {
	var e exposition
	weird := "a\\b \"quoted\"\nline2"
	e.add("x_total", "Help with \\ and\nnewline and \"quotes\".", typeCounter,
		series{labels: []label{{"route", weird}, {"code", "500"}}, value: 2},
		series{labels: []label{{"route", "plain"}, {"code", "200"}}, value: 1})
	body := string(e.appendText(nil))
	want := `# HELP x_total Help with \\ and\nnewline and "quotes".
# TYPE x_total counter
x_total{code="200",route="plain"} 1
x_total{code="500",route="a\\b \"quoted\"\nline2"} 2
`
	if body != want {
		t.Fatalf("appendText() =\n%s\nwant\n%s", body, want)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("TextToMetricFamilies() error = %v", err)
	}
	f := fams["x_total"]
	if got := f.GetHelp(); got != "Help with \\ and\nnewline and \"quotes\"." {
		t.Errorf("parsed HELP = %q", got)
	}
	var got []string
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "route" {
				got = append(got, l.GetValue())
			}
		}
	}
	if d := cmp.Diff([]string{"plain", weird}, got); d != "" {
		t.Errorf("parsed route labels (-want +got):\n%s", d)
	}
}

// A histogram keeps the pool's cumulative counts per bound, in order of
// bound, and ends with +Inf, _sum and _count.
func TestExpositionHistogram(t *testing.T) {
	var e exposition
	e.add("d_seconds", "Durations.", typeHistogram, histogramSeries(pool.Histogram{
		Bounds: []float64{10, 0.5, 1}, Counts: []uint64{7, 1, 3}, Count: 9, Sum: 41.25,
	}))
	body := string(e.appendText(nil))
	want := `# HELP d_seconds Durations.
# TYPE d_seconds histogram
d_seconds_bucket{le="0.5"} 1
d_seconds_bucket{le="1"} 3
d_seconds_bucket{le="10"} 7
d_seconds_bucket{le="+Inf"} 9
d_seconds_sum 41.25
d_seconds_count 9
`
	if body != want {
		t.Fatalf("appendText() =\n%s\nwant\n%s", body, want)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("TextToMetricFamilies() error = %v", err)
	}
	h := fams["d_seconds"].GetMetric()[0].GetHistogram()
	var cum []uint64
	for _, b := range h.GetBucket() {
		cum = append(cum, b.GetCumulativeCount())
	}
	if d := cmp.Diff([]uint64{1, 3, 7, 9}, cum); d != "" || h.GetSampleCount() != 9 || h.GetSampleSum() != 41.25 {
		t.Errorf("parsed histogram: count %d, sum %v, buckets (-want +got):\n%s", h.GetSampleCount(), h.GetSampleSum(), d)
	}
}

func TestFormatFloat(t *testing.T) {
	for _, tt := range []struct {
		in   float64
		want string
	}{
		{0, "0"}, {1, "1"}, {-3, "-3"}, {1048576, "1048576"}, {12.5, "12.5"}, {0.001, "0.001"},
		{1 << 53, "9.007199254740992e+15"}, {math.MaxUint64, "1.8446744073709552e+19"},
		{math.Inf(1), "+Inf"}, {math.Inf(-1), "-Inf"}, {math.NaN(), "NaN"},
	} {
		if got := formatFloat(tt.in); got != tt.want {
			t.Errorf("formatFloat(%v) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	line := "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 12345 1606479872 3570 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	got, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatalf("parseProcStat() error = %v", err)
	}
	want := procStat{utime: 250, stime: 50, start: 12345, vsize: 1606479872, rss: 3570}
	if got != want {
		t.Errorf("parseProcStat() = %+v; want %+v", got, want)
	}
	if _, err := parseProcStat([]byte("1 (x) S 1 2")); err == nil {
		t.Errorf("parseProcStat(short) error = nil; want an error")
	}
}

// The request counter is safe for concurrent use.
func TestRequestCounterConcurrent(t *testing.T) {
	m := newMetrics(nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				m.request("GET /x", 0)
			}
		})
	}
	wg.Wait()
	ss := m.requests.series()
	if len(ss) != 1 || ss[0].value != 8000 || ss[0].labels[0] != (label{"code", "200"}) {
		t.Errorf("series() = %+v; want one series of 8000 with code 200", ss)
	}
}

// GET /metrics carries the Go runtime and process families under
// client_golang's names and types.
func TestMetricsRuntimeFamilies(t *testing.T) {
	e := newTestEnv(t, &fakePool{}, nil)
	_, _, body := e.send(t, apiCall{method: "GET", path: "/metrics"})
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("GET /metrics does not parse: %v", err)
	}
	for name, typ := range map[string]string{
		"go_goroutines":                 "GAUGE",
		"go_threads":                    "GAUGE",
		"go_info":                       "GAUGE",
		"go_gc_duration_seconds":        "SUMMARY",
		"go_memstats_heap_alloc_bytes":  "GAUGE",
		"go_memstats_sys_bytes":         "GAUGE",
		"go_memstats_alloc_bytes_total": "COUNTER",
		"process_resident_memory_bytes": "GAUGE",
		"process_virtual_memory_bytes":  "GAUGE",
		"process_open_fds":              "GAUGE",
		"process_max_fds":               "GAUGE",
		"process_start_time_seconds":    "GAUGE",
		"process_cpu_seconds_total":     "COUNTER",
		"agentpool_sse_streams":         "GAUGE",
	} {
		f, ok := fams[name]
		if !ok {
			t.Errorf("GET /metrics lacks family %s", name)
			continue
		}
		if got := f.GetType().String(); got != typ {
			t.Errorf("family %s has type %s; want %s", name, got, typ)
		}
	}
	if v := fams["process_start_time_seconds"].GetMetric()[0].GetGauge().GetValue(); v < 1e9 {
		t.Errorf("process_start_time_seconds = %v; want seconds since the epoch", v)
	}
}
