package acp_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// benchBackend starts a backend on the scripted fake agent with cfg (the
// Spec is filled in but for its Dir, a temporary directory if empty) and
// stops it when the benchmark ends.
func benchBackend(b *testing.B, s agenttest.Script, cfg acp.Config) *acp.Backend {
	b.Helper()
	dir := cfg.Spec.Dir
	if dir == "" {
		dir = b.TempDir()
	}
	cfg.Spec = agenttest.Spec("bench", s)
	cfg.Spec.Dir = dir
	cfg.Logger = quietLogger()
	cfg.StopGrace = time.Second
	be, err := acp.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := be.Start(ctx, ""); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := be.Stop(context.Background()); err != nil {
			b.Errorf("Stop: %v", err)
		}
	})
	return be
}

// BenchmarkPromptWarm: one turn with one chunk back on a warm agent.
//
//   - backend: acp.Backend and the fake agent as a separate process;
//   - sdk-fake-process: a plain SDK client and the same fake agent process;
//   - raw-fake-process: the same fake agent process prompted by a client
//     that writes one line and reads the answer on the calling goroutine:
//     the floor set by the fake agent and the process boundary;
//   - sdk-fake-inprocess: a plain SDK client and the fake agent on a goroutine;
//   - sdk-inprocess: a plain SDK client and the SDK's own agent side.
//
// backend minus sdk-fake-process is agentpool's overhead per turn;
// sdk-fake-process minus sdk-fake-inprocess is the process boundary. The
// idle- variants wait 5 ms before each prompt, as a prompt after a pause
// does: both processes have gone to sleep and must be woken, which on a
// virtual machine costs more than the whole turn back to back.
//
//	go test -run '^$' -bench PromptWarm -benchtime 2000x ./backends/acp/
func BenchmarkPromptWarm(b *testing.B) {
	const pause = 5 * time.Millisecond
	one := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "x"}}}}}
	backend := func(name string, gap time.Duration) {
		b.Run(name, func(b *testing.B) {
			be := benchBackend(b, one, acp.Config{})
			promptTurns(b, gap, be.Info().PID, func(b *testing.B) int64 {
				var n int64
				res, err := be.Prompt(context.Background(), backends.Prompt{Text: "hi"}, func(backends.Event) { n++ })
				if err != nil || res.StopReason != backends.StopEndTurn {
					b.Fatalf("Prompt = %v, %v; want end_turn", res.StopReason, err)
				}
				return n
			})
		})
	}
	sdk := func(name string, gap time.Duration, pipes func(*testing.B) agentPipes) {
		b.Run(name, func(b *testing.B) {
			c := connectSDK(b, pipes(b))
			defer c.close()
			promptTurns(b, gap, c.p.pid, c.prompt)
		})
	}
	raw := func(name string, gap time.Duration) {
		b.Run(name, func(b *testing.B) {
			c := connectRaw(b, fakeProcess(b, one))
			promptTurns(b, gap, c.pid, c.prompt)
		})
	}
	process := func(b *testing.B) agentPipes { return fakeProcess(b, one) }
	backend("backend", 0)
	raw("raw-fake-process", 0)
	sdk("sdk-fake-process", 0, process)
	sdk("sdk-fake-inprocess", 0, func(b *testing.B) agentPipes { return fakeInProcess(b, one) })
	sdk("sdk-inprocess", 0, func(b *testing.B) agentPipes { return sdkAgentInProcess(b, 1) })
	backend("idle-backend", pause)
	sdk("idle-sdk-fake-process", pause, process)
	raw("idle-raw-fake-process", pause)
}

// promptTurns times b.N turns of prompt, which returns the chunks a turn
// brought (one is expected), each after a pause of gap when gap > 0, and
// reports their latency and, back to back, the CPU of the client and of the
// agent process pid.
func promptTurns(b *testing.B, gap time.Duration, pid int, prompt func(*testing.B) int64) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	cpu := startCPU(pid)
	for i := 0; i < b.N; i++ {
		if gap > 0 {
			b.StopTimer()
			time.Sleep(gap)
			b.StartTimer()
		}
		t0 := time.Now()
		if n := prompt(b); n != 1 {
			b.Fatalf("turn %d brought %d chunks; want 1", i, n)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	if gap == 0 {
		cpu.report(b, int64(b.N), "op")
	}
	reportLatency(b, lat)
}

// BenchmarkStartCold: spawn + initialize + session/new of the fake agent
// (stopping it is not timed).
//
//   - backend: acp.Backend.Start;
//   - sdk-fake-process: the same with a plain SDK client on raw pipes;
//   - exec-exit: spawning the test binary as a helper that exits at once,
//     the floor set by exec and the Go runtime's start.
func BenchmarkStartCold(b *testing.B) {
	b.Run("backend", func(b *testing.B) {
		spec := agenttest.Spec("bench", agenttest.Script{})
		spec.Dir = b.TempDir()
		for i := 0; i < b.N; i++ {
			be, err := acp.New(acp.Config{Spec: spec, Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := be.Start(context.Background(), ""); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := be.Stop(context.Background()); err != nil {
				b.Fatalf("Stop: %v", err)
			}
			b.StartTimer()
		}
	})
	b.Run("sdk-fake-process", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c := connectSDK(b, fakeProcess(b, agenttest.Script{}))
			b.StopTimer()
			c.close()
			b.StartTimer()
		}
	})
	b.Run("exec-exit", func(b *testing.B) {
		zero := 0
		for i := 0; i < b.N; i++ {
			p := fakeProcess(b, agenttest.Script{ExitBeforeHandshake: &zero})
			if _, err := p.r.Read(make([]byte, 1)); err == nil {
				b.Fatal("helper wrote to stdout; want it to exit at once")
			}
			p.stop()
		}
	})
}

// BenchmarkChunkThroughput: agent_message_chunk updates streamed in one
// turn; reports updates/s.
//
//   - backend: 10 000 per turn through acp.Backend to Events (the goal:
//     at least 100 000/s);
//   - raw-fake-process: 10 000 per turn to a client that only counts the
//     agent's lines: the rate at which the fake agent itself can emit;
//   - sdk-fake-process: a plain SDK client decoding the same agent's
//     updates, 1 000 per turn: with more, a plain SDK client overflows its
//     notification queue of 1 024 and drops the connection (ACP-NOTES), the
//     reason the backend queues updates itself;
//   - sdk-inprocess: the SDK's agent and client in one process, 1 000 per turn.
func BenchmarkChunkThroughput(b *testing.B) {
	const chunks, sdkChunks = 10000, 1000
	script := func(n int) agenttest.Script {
		return agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: n}}}}}
	}
	report := func(b *testing.B, n, perTurn int64) {
		if n != perTurn*int64(b.N) {
			b.Fatalf("delivered %d updates; want %d", n, perTurn*int64(b.N))
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "updates/s")
	}
	b.Run("backend", func(b *testing.B) {
		be := benchBackend(b, script(chunks), acp.Config{})
		var n int64
		emit := func(ev backends.Event) {
			if ev.Type == backends.EventMessageChunk {
				n++
			}
		}
		b.ResetTimer()
		cpu := startCPU(be.Info().PID)
		for i := 0; i < b.N; i++ {
			if _, err := be.Prompt(context.Background(), backends.Prompt{Text: "go"}, emit); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		report(b, n, chunks)
		cpu.report(b, n, "update")
	})
	b.Run("raw-fake-process", func(b *testing.B) {
		c := connectRaw(b, fakeProcess(b, script(chunks)))
		var n int64
		b.ResetTimer()
		cpu := startCPU(c.pid)
		for i := 0; i < b.N; i++ {
			n += c.prompt(b)
		}
		b.StopTimer()
		report(b, n, chunks)
		cpu.report(b, n, "update")
	})
	sdk := func(name string, pipes func(*testing.B) agentPipes) {
		b.Run(name, func(b *testing.B) {
			c := connectSDK(b, pipes(b))
			defer c.close()
			var n int64
			b.ResetTimer()
			cpu := startCPU(c.p.pid)
			for i := 0; i < b.N; i++ {
				n += c.prompt(b)
			}
			b.StopTimer()
			report(b, n, sdkChunks)
			cpu.report(b, n, "update")
		})
	}
	sdk("sdk-fake-process", func(b *testing.B) agentPipes { return fakeProcess(b, script(sdkChunks)) })
	sdk("sdk-inprocess", func(b *testing.B) agentPipes { return sdkAgentInProcess(b, sdkChunks) })
}
