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
//	first:            Create (warm-up on), a 2 s pause, the session's first
//	                  prompt
//	warm:             a prompt on a session whose agent started long ago,
//	                  right after its previous prompt
//	warm-after-pause: the same warm agent after the same 2 s pause
//	cold:             Create with warm false, a 2 s pause, the first prompt
//	                  (the latency the warm-up removes), every fifth op
//
// Only the prompts are timed (Prompt called → returned, the wait for the
// durable turn.ended included), as medians in milliseconds.
//
// The figure of the issue is first/warm-after-pause (target: at most
// 1.2): a warm prompt typed after the same pause as the first one. The
// pause itself costs any prompt, warm or not, a few hundred microseconds
// on a virtual machine whose CPUs sleep while nothing runs (caches gone,
// threads to wake): warm-after-pause/warm shows that cost, which is the
// machine's and no warm-up can remove; first/warm, back to back, includes
// it. What first/warm-after-pause still holds is the agent's own first
// prompt: a new fake agent process answers its first prompt about 0.1 ms
// slower than its next ones (its Go runtime's first use of that path),
// to a client that writes the line itself as well. A single prompt after a pause varies by tens of percent on a shared
// machine: take 30 ops or more. Each op takes about 5 s:
//
//	go test -run '^$' -bench FirstPromptAfterWarmUp -benchtime 30x -count 3 ./pool/
func BenchmarkFirstPromptAfterWarmUp(b *testing.B) {
	const (
		startDelay = 1500 // ms the fake agent takes to answer initialize
		pause      = 2 * time.Second
		coldEvery  = 5 // cold starts take 3.5 s and vary little
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
	for i := range b.N {
		first = append(first, firstOf(true))
		warm = append(warm, timedPrompt(b, e, ws.ID, "", "hello").took())
		// The same warm agent after the same 2 s pause as the first
		// prompts: what a user who takes 2 s to type gets from a session
		// that is not new.
		time.Sleep(pause)
		paused = append(paused, timedPrompt(b, e, ws.ID, "", "hello").took())
		if i%coldEvery == 0 {
			cold = append(cold, firstOf(false))
		}
	}
	b.StopTimer()
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return quantile(d, 0.5) }
	f50, w50, c50, p50 := med(first), med(warm), med(cold), med(paused)
	b.ReportMetric(0, "ns/op") // an op is mostly pauses
	b.ReportMetric(ms(f50), "first-p50-ms")
	b.ReportMetric(ms(p50), "warm-after-pause-p50-ms")
	b.ReportMetric(ms(w50), "warm-p50-ms")
	b.ReportMetric(ms(c50), "cold-p50-ms")
	b.ReportMetric(float64(f50)/float64(p50), "first/warm-after-pause")
	b.ReportMetric(float64(f50)/float64(w50), "first/warm")
	b.ReportMetric(float64(p50)/float64(w50), "warm-after-pause/warm")
	b.ReportMetric(float64(c50)/float64(p50), "cold/warm-after-pause")
	if st, want := e.p.Stats(), int64(1+b.N+len(cold)); st.Spawns != want {
		b.Fatalf("Stats().Spawns = %d; want %d (one agent per session)", st.Spawns, want)
	}
}
