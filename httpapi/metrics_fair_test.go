package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/pool"
)

// queuedPool is a fake pool whose store's write queue holds qs.
type queuedPool struct {
	*fakePool
	qs []pool.WriteQueue
}

func (p queuedPool) WriteQueues() []pool.WriteQueue { return p.qs }

// /metrics and GET /v1/pool show each session's write queue: what is
// queued, how long the oldest event waited, how long its agent was held.
func TestMetricsWriteQueues(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	qs := []pool.WriteQueue{
		{Session: "s-flood", Events: 7000, Bytes: 2 << 20, Oldest: 250 * time.Millisecond, Slowed: true,
			Held: 1500 * time.Millisecond, Holds: 40, Episodes: 1, Paced: 3200 * time.Millisecond},
		{Session: "s-quick", Events: 1, Bytes: 300},
	}
	e := newTestEnv(t, fp, func(c *Config) { c.Pool = queuedPool{fp, qs} })
	status, _, body := e.send(t, apiCall{method: "GET", path: "/metrics"})
	if status != 200 {
		t.Fatalf("GET /metrics = %d", status)
	}
	for _, want := range []string{
		`agentpool_write_queue_events{session="s-flood"} 7000`,
		`agentpool_write_queue_events{session="s-quick"} 1`,
		`agentpool_write_queue_bytes{session="s-flood"} 2097152`,
		`agentpool_write_queue_oldest_seconds{session="s-flood"} 0.25`,
		`agentpool_write_queue_held_seconds_total{session="s-flood"} 1.5`,
		`agentpool_write_queue_holds_total{session="s-flood"} 40`,
		`agentpool_write_queue_paced_seconds_total{session="s-flood"} 3.2`,
		`agentpool_write_queue_slowed{session="s-flood"} 1`,
		`agentpool_write_queue_slowed{session="s-quick"} 0`,
		`agentpool_agent_slowed_total{session="s-flood"} 1`,
		`# TYPE agentpool_write_queue_held_seconds_total counter`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
	status, _, body = e.send(t, apiCall{method: "GET", path: "/v1/pool"})
	var st PoolStatus
	if err := json.Unmarshal([]byte(body), &st); status != 200 || err != nil {
		t.Fatalf("GET /v1/pool = %d %v", status, err)
	}
	if len(st.WriteQueues) != 2 || st.WriteQueues[0] != qs[0] {
		t.Errorf("GET /v1/pool write_queues = %+v; want %+v", st.WriteQueues, qs)
	}

	// A pool with nothing queued has no such series.
	e = newTestEnv(t, fp, func(c *Config) { c.Pool = queuedPool{fp, nil} })
	_, _, body = e.send(t, apiCall{method: "GET", path: "/metrics"})
	if strings.Contains(body, "agentpool_write_queue_") {
		t.Error("GET /metrics has write-queue series with nothing queued")
	}
}
