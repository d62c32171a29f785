package pool_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// BenchmarkFirstPromptAfterWarmUp measures what a session's warm-up buys
// (issue 16): an agent that takes 1.5 s to start, a user who takes 2 s to
// type the first prompt. Each op times, in one pool:
//
//	first: Create (warm-up on), a 2 s pause, the session's first prompt
//	warm:  a prompt on a session whose agent started long ago
//	cold:  Create with warm false, a 2 s pause, the first prompt (the
//	       latency the warm-up removes)
//
// Only the prompts are timed (Prompt called → returned), as medians in
// milliseconds, with first/warm (the target is at most 1.2) and cold/warm.
// Each op takes about 6 s:
//
//	go test -run '^$' -bench FirstPromptAfterWarmUp -benchtime 7x ./pool/
func BenchmarkFirstPromptAfterWarmUp(b *testing.B) {
	const (
		startDelay = 1500 // ms the fake agent takes to answer initialize
		pause      = 2 * time.Second
	)
	benchSilence(b)
	e := newEnv(b, map[string]any{"slow": providerEntry(agenttest.Script{InitDelayMs: startDelay})}, benchQuiet)
	ctx := context.Background()
	ws := e.create("slow", false)
	timedPrompt(b, e, ws.ID, "", "start the warm agent")
	timedPrompt(b, e, ws.ID, "", "past its first paths")

	firstOf := func(warm bool) time.Duration {
		s := e.create("slow", warm)
		time.Sleep(pause)
		d := timedPrompt(b, e, s.ID, "", "hello").took()
		if _, err := e.p.Close(ctx, s.ID, true); err != nil {
			b.Fatalf("Close(%s): %v", s.ID, err)
		}
		return d
	}
	var first, warm, paused, cold []time.Duration
	b.ResetTimer()
	for range b.N {
		first = append(first, firstOf(true))
		warm = append(warm, timedPrompt(b, e, ws.ID, "", "hello").took())
		// The same warm agent after the same 2 s pause as the first
		// prompts: what a user who takes 2 s to type gets from a session
		// that is not new.
		time.Sleep(pause)
		paused = append(paused, timedPrompt(b, e, ws.ID, "", "hello").took())
		cold = append(cold, firstOf(false))
	}
	b.StopTimer()
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return quantile(d, 0.5) }
	f50, w50, c50, p50 := med(first), med(warm), med(cold), med(paused)
	b.ReportMetric(ms(p50), "warm-after-pause-p50-ms")
	b.ReportMetric(float64(f50)/float64(p50), "first/warm-after-pause")
	b.ReportMetric(0, "ns/op") // an op is mostly pauses
	b.ReportMetric(ms(f50), "first-p50-ms")
	b.ReportMetric(ms(w50), "warm-p50-ms")
	b.ReportMetric(ms(c50), "cold-p50-ms")
	b.ReportMetric(float64(f50)/float64(w50), "first/warm")
	b.ReportMetric(float64(c50)/float64(w50), "cold/warm")
	if st := e.p.Stats(); st.Spawns != int64(1+2*b.N) {
		b.Fatalf("Stats().Spawns = %d; want %d (one agent per session)", st.Spawns, 1+2*b.N)
	}
}
