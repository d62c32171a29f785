package httpapi

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
