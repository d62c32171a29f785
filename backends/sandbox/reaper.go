package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/backends"
)

// sweepMarked is the subreaper fallback's kill: it SIGKILLs every live
// process whose environment carries EnvJail with the given prefix, plus
// their descendants, until none is left (bounded by killWait), and reaps
// the ones that were reparented to the daemon, except keep (pids an
// exec.Cmd of ours will reap). It returns how many it killed.
func sweepMarked(prefix string, keep map[int]bool) int {
	self := os.Getpid()
	killed := map[int]bool{}
	deadline := time.Now().Add(killWait)
	for {
		procs := backends.Processes()
		targets := map[int]bool{}
		for _, st := range procs {
			if st.Live() && st.PID != self && marked(st.PID, prefix) {
				targets[st.PID] = true
			}
		}
		// Descendants of a target are targets, whatever their environment.
		for changed := true; changed; {
			changed = false
			for _, st := range procs {
				if st.Live() && !targets[st.PID] && targets[st.PPID] && st.PID != self {
					targets[st.PID] = true
					changed = true
				}
			}
		}
		for pid := range targets {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed[pid] = true
		}
		reapAdopted(killed, keep)
		if len(targets) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(killPoll)
	}
	return len(killed)
}

// marked reports whether pid's environment has EnvJail with the prefix.
func marked(pid int, prefix string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	want := []byte(EnvJail + "=" + prefix)
	for _, kv := range bytes.Split(b, []byte{0}) {
		if bytes.HasPrefix(kv, want) {
			rest := kv[len(want):]
			// The prefix is a whole path element, or the entire mark.
			if len(rest) == 0 || rest[0] == '/' || strings.HasSuffix(prefix, "/") {
				return true
			}
		}
	}
	return false
}

// reapAdopted reaps the killed processes that are the daemon's children by
// adoption (it is their subreaper), leaving keep alone.
func reapAdopted(pids, keep map[int]bool) {
	self := os.Getpid()
	for pid := range pids {
		if keep[pid] {
			continue
		}
		st, err := backends.ReadProcStat(pid)
		if err != nil || st.PPID != self {
			continue
		}
		var info unix.Siginfo
		_ = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG, nil)
	}
}
