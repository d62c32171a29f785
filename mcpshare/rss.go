package mcpshare

import (
	"os"
	"strconv"
	"strings"
)

// TreeRSS returns the resident memory, in bytes, of process pid and all
// its descendants (read from /proc; 0 where there is none).
func TreeRSS(pid int) int64 {
	var total int64
	for _, p := range Tree(pid) {
		total += procRSS(p)
	}
	return total
}

// Tree returns pid and the ids of all its descendants that live now.
func Tree(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := parentOf(p); pp > 0 {
			children[pp] = append(children[pp], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		return out[1:]
	}
	return out
}

// parentOf reads the parent of pid from /proc/pid/stat.
func parentOf(pid int) int {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}

// procRSS reads the resident size of pid from /proc/pid/statm.
func procRSS(pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
