package acp_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuMeter measures the CPU time spent by this process and by one agent
// process while a benchmark runs. Under a loaded machine wall-clock figures
// swing widely; CPU per operation stays comparable from run to run.
type cpuMeter struct {
	pid         int
	self, agent time.Duration
}

// startCPU starts measuring; pid is the agent's process (0: none).
func startCPU(pid int) *cpuMeter {
	return &cpuMeter{pid: pid, self: selfCPU(), agent: procCPU(pid)}
}

// report reports the CPU µs of this process and of the agent per unit,
// ops being the number of units done ("op", "update").
func (m *cpuMeter) report(b *testing.B, ops int64, unit string) {
	b.Helper()
	if ops <= 0 {
		return
	}
	b.ReportMetric(us(selfCPU()-m.self)/float64(ops), "cpu-µs/"+unit)
	if m.pid != 0 {
		b.ReportMetric(us(procCPU(m.pid)-m.agent)/float64(ops), "agent-cpu-µs/"+unit)
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the CPU time of pid's live threads, from the scheduler's
// nanosecond counters (/proc/PID/task/TID/schedstat), 0 if unavailable.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "schedstat"))
	var total time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		f := strings.Fields(string(raw))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err == nil {
			total += time.Duration(ns)
		}
	}
	return total
}
