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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read stat of %d: %w", pid, err)
	}
	// The command name (field 2) may contain spaces and parentheses: skip
	// past the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse stat of %d: no command field", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("parse stat of %d: %d fields", pid, len(fields))
	}
	t, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse start time of %d: %w", pid, err)
	}
	return t, nil
}

// GroupMembers lists the pids of live processes whose process group is pgid,
// by scanning /proc. Zombies are not counted.
func GroupMembers(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		// f[0] state, f[1] ppid, f[2] pgrp.
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			out = append(out, pid)
		}
	}
	return out
}

// GroupRSS returns the resident memory in bytes of every process group,
// by pgid, from one scan of /proc (field 24 of /proc/<pid>/stat).
func GroupRSS() map[int]int64 {
	out := map[int]int64{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	page := int64(os.Getpagesize())
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		// f[2] is field 5 (pgrp); f[21] is field 24 (rss, pages).
		if len(f) < 22 {
			continue
		}
		g, _ := strconv.Atoi(f[2])
		rss, _ := strconv.ParseInt(f[21], 10, 64)
		out[g] += rss * page
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
