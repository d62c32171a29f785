package httpapi

import (
	"regexp"
	"strings"
	"testing"
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
		`agentpool_http_requests_total{route="GET /v1/sessions",code="200"} 1`,
		`agentpool_http_requests_total{route="GET /v1/sessions/{id}",code="404"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
	sample := regexp.MustCompile(`^agentpool_[a-z_]+(\{([a-z_]+="([^"\\]|\\.)*",?)+\})? (-?[0-9.e+]+|\+Inf|NaN)$`)
	meta := regexp.MustCompile(`^# (HELP|TYPE) agentpool_[a-z_]+ .+$`)
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if !sample.MatchString(line) && !meta.MatchString(line) {
			t.Errorf("GET /metrics line %q is not in the exposition format", line)
		}
	}
}

func TestEscapeLabel(t *testing.T) {
	if got, want := escapeLabel("a\"b\\c\nd"), `a\"b\\c\nd`; got != want {
		t.Errorf("escapeLabel = %q; want %q", got, want)
	}
}
