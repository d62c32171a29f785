package httpapi

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// reportPercentiles reports the p50 and p99 of lat in microseconds.
func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// follow runs Client.Events on s1 until ctx ends, passing every event to fn.
func follow(ctx context.Context, wg *sync.WaitGroup, c *Client, fn func(backends.Event)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = c.Events(ctx, "s1", 0, func(ev backends.Event) error { fn(ev); return nil })
	}()
}

// BenchmarkSSEDelivery measures the latency from an event's publication by
// the pool to its decoding by each of 100 stream subscribers (Client.Events
// over loopback TCP). One op is one event delivered to all 100.
func BenchmarkSSEDelivery(b *testing.B) {
	const subs = 100
	fp := &fakePool{}
	sessionWorld(fp)
	log := newLog(b, 4096)
	streamWorld(fp, log)
	e := newTestEnv(b, fp, nil)
	tr := &http.Transport{MaxIdleConnsPerHost: subs}
	defer tr.CloseIdleConnections()
	c := &Client{BaseURL: e.ts.URL, Token: e.token, HTTP: &http.Client{Transport: tr}}
	recv := make(chan time.Duration, subs)
	ctx, cancel := context.WithCancel(b.Context())
	var wg sync.WaitGroup
	for range subs {
		follow(ctx, &wg, c, func(ev backends.Event) { recv <- time.Since(ev.Time) })
	}
	waitFor(b, "subscribers", func() bool { return log.Subscribers() == subs })
	lat := make([]time.Duration, 0, b.N*subs)
	b.ResetTimer()
	for range b.N {
		log.Publish("s1", backends.EventMessageChunk, 1, backends.ChunkData{Role: "agent", Text: "a chunk of agent text"})
		for range subs {
			lat = append(lat, <-recv)
		}
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	reportPercentiles(b, lat)
}

// BenchmarkAPIPromptFirstEvent measures POST /v1/sessions/{id}/prompt →
// the turn's first event received on the session's stream, over loopback
// TCP, against a fake pool whose StartPrompt publishes turn.started at
// once (a warm backend). The pool-level figure is the pool's own benchmark.
func BenchmarkAPIPromptFirstEvent(b *testing.B) {
	fp := &fakePool{}
	sessionWorld(fp)
	log := newLog(b, 4096)
	streamWorld(fp, log)
	var turns atomic.Int64
	fp.StartPromptFunc = func(_ context.Context, r pool.PromptRequest) (pool.Turn, error) {
		turn := turns.Add(1)
		log.Publish(r.Session, backends.EventTurnStarted, turn, map[string]any{"turn": turn, "prompt": r.Text})
		return pool.Turn{ID: turn, Session: r.Session, Agent: "demo", Prompt: r.Text, StartedAt: time.Now()}, nil
	}
	e := newTestEnv(b, fp, nil)
	recv := make(chan backends.Event, 16)
	ctx, cancel := context.WithCancel(b.Context())
	var wg sync.WaitGroup
	follow(ctx, &wg, e.client, func(ev backends.Event) { recv <- ev })
	waitFor(b, "the subscriber", func() bool { return log.Subscribers() == 1 })
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		t, err := e.client.Prompt(ctx, "s1", "demo", "hello", false)
		if err != nil {
			b.Fatalf("Prompt() error = %v", err)
		}
		if ev := <-recv; ev.Turn != t.ID {
			b.Fatalf("first event of turn %d is of turn %d", t.ID, ev.Turn)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	reportPercentiles(b, lat)
}
