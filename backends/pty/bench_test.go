package pty_test

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/pty"
)

var stampRE = regexp.MustCompile(`t=(\d+)`)

func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// BenchmarkTurnEndDetection measures the delay from the fake TUI writing
// its ready prompt (it stamps the monotonic clock in the same write) to
// Prompt returning, with a ready pattern. Screen-stability tools wait 2 s
// (or poll every 500 ms) for the same decision.
func BenchmarkTurnEndDetection(b *testing.B) {
	h := newHarness(b, pty.Config{Spec: fakeSpec(b, envDelay+"=0")})
	h.start(b, "")
	delays := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		res, err := h.b.Prompt(b.Context(), backends.Prompt{Text: "bench"}, nil)
		end := monotonicNow()
		if err != nil || res.StopReason != backends.StopEndTurn {
			b.Fatalf("Prompt(bench) = %+v, %v", res, err)
		}
		m := stampRE.FindAllStringSubmatch(h.b.Screen(), -1)
		if len(m) == 0 {
			b.Fatalf("no stamp on the screen:\n%s", h.b.Screen())
		}
		stamp, _ := strconv.ParseInt(m[len(m)-1][1], 10, 64)
		delays = append(delays, time.Duration(end-stamp))
	}
	b.StopTimer()
	slices.Sort(delays)
	pct := func(p float64) float64 {
		return float64(delays[int(p*float64(len(delays)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(delays[len(delays)-1].Microseconds())/1000, "max-ms")
}

// BenchmarkFloodThroughput measures output through the whole path: the
// program floods 8 MiB, read from the terminal, fed to the emulator with
// the ready pattern checked after each chunk, fanned out and coalesced
// into pty.output events.
func BenchmarkFloodThroughput(b *testing.B) {
	const size = 8 << 20
	h := newHarness(b, pty.Config{Spec: fakeSpec(b, envDelay+"=0")})
	h.start(b, "")
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		res, err := h.b.Prompt(b.Context(), backends.Prompt{Text: "flood " + strconv.Itoa(size)}, nil)
		if err != nil || res.StopReason != backends.StopEndTurn {
			b.Fatalf("Prompt(flood) = %+v, %v", res, err)
		}
	}
}

// BenchmarkIdleCPU measures the CPU the daemon (this process) spends over
// a 2 s window while one PTY agent sits warm and idle, and the agent's own.
func BenchmarkIdleCPU(b *testing.B) {
	const window = 2 * time.Second
	h := newHarness(b, pty.Config{Spec: fakeSpec(b)})
	info := h.start(b, "")
	time.Sleep(100 * time.Millisecond) // let the start settle
	var self, agent time.Duration
	b.ResetTimer()
	for b.Loop() {
		s0, a0 := selfCPU(b), procCPU(b, info.PID)
		time.Sleep(window)
		self += selfCPU(b) - s0
		agent += procCPU(b, info.PID) - a0
	}
	b.StopTimer()
	n := time.Duration(b.N)
	b.ReportMetric(float64((self/n).Microseconds())/1000, "daemon-cpu-ms/2s")
	b.ReportMetric(100*float64(self/n)/float64(window), "daemon-cpu-%")
	b.ReportMetric(float64((agent/n).Microseconds())/1000, "agent-cpu-ms/2s")
}

func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU reads utime+stime of pid from /proc (clock ticks of 10ms).
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// After the command: state is field 3, utime 14, stime 15.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
