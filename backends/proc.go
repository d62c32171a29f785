package backends

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcStartTicks returns the start time of pid in clock ticks since boot,
// field 22 of /proc/<pid>/stat. Together with the pid it identifies a process
// across a daemon restart, so a recycled pid is never mistaken for an agent.
func ProcStartTicks(pid int) (uint64, error) {
	st, err := ReadProcStat(pid)
	return st.StartTicks, err
}

// ProcStat is what agentpool reads of /proc/<pid>/stat.
type ProcStat struct {
	PID, PPID, PGID, Session int
	State                    byte
	// RSS is the resident memory in bytes.
	RSS int64
	// StartTicks is the start time in clock ticks since boot.
	StartTicks uint64
}

// Live reports whether the process is neither a zombie nor dead.
func (s ProcStat) Live() bool { return s.State != 'Z' && s.State != 'X' }

// ReadProcStat parses /proc/<pid>/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcStat{}, fmt.Errorf("read stat of %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields that matter come after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ProcStat{}, fmt.Errorf("parse stat of %d: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), f[1] ppid, f[2] pgrp, f[3] session,
	// f[19] field 22 (starttime), f[21] field 24 (rss, pages).
	if len(f) < 22 || len(f[0]) == 0 {
		return ProcStat{}, fmt.Errorf("parse stat of %d: %d fields", pid, len(f))
	}
	st := ProcStat{PID: pid, State: f[0][0]}
	st.PPID, _ = strconv.Atoi(f[1])
	st.PGID, _ = strconv.Atoi(f[2])
	st.Session, _ = strconv.Atoi(f[3])
	if st.StartTicks, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return ProcStat{}, fmt.Errorf("parse start time of %d: %w", pid, err)
	}
	pages, _ := strconv.ParseInt(f[21], 10, 64)
	st.RSS = pages * int64(os.Getpagesize())
	return st, nil
}

// Processes reads the stat of every process in /proc. Processes that end
// while being read are skipped.
func Processes() []ProcStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]ProcStat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := ReadProcStat(pid); err == nil {
			out = append(out, st)
		}
	}
	return out
}

// GroupMembers lists the pids of live processes whose process group is
// pgid. Zombies are not counted.
func GroupMembers(pgid int) []int {
	var out []int
	for _, st := range Processes() {
		if st.Live() && st.PGID == pgid {
			out = append(out, st.PID)
		}
	}
	return out
}

// GroupRSS returns the resident memory in bytes of every process group,
// by pgid, from one scan of /proc.
func GroupRSS() map[int]int64 {
	out := map[int]int64{}
	for _, st := range Processes() {
		out[st.PGID] += st.RSS
	}
	return out
}

// MemTotal returns the machine's memory in bytes from /proc/meminfo, or 0.
func MemTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
