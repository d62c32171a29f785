package agenttest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// PidEntry names one process: its pid and its start time (field 22 of
// /proc/<pid>/stat, in clock ticks since boot), which together tell it from
// a later process that got the same pid.
type PidEntry struct {
	Pid       int
	StartTime uint64
}

// ProcStat is what tests need from /proc/<pid>/stat.
type ProcStat struct {
	Pid int
	// State is the one-letter state ('R', 'S', 'Z', ...).
	State byte
	PPid  int
	PGID  int
	// SID is the session id.
	SID       int
	StartTime uint64
}

// ReadProcStat reads /proc/<pid>/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{}, err
	}
	// The command name (field 2) is in parentheses and may hold spaces and
	// parentheses itself: the fields resume after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3
	if len(f) < 20 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	st := ProcStat{Pid: pid, State: f[0][0]}
	for _, v := range []struct {
		dst *int
		s   string
	}{{&st.PPid, f[1]}, {&st.PGID, f[2]}, {&st.SID, f[3]}} {
		if *v.dst, err = strconv.Atoi(v.s); err != nil {
			return ProcStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	if st.StartTime, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// selfEntry names the calling process.
func selfEntry() (PidEntry, error) {
	st, err := ReadProcStat(os.Getpid())
	if err != nil {
		return PidEntry{}, err
	}
	return PidEntry{Pid: st.Pid, StartTime: st.StartTime}, nil
}

// String formats e as a pid file line without its newline: "pid starttime".
func (e PidEntry) String() string {
	return strconv.Itoa(e.Pid) + " " + strconv.FormatUint(e.StartTime, 10)
}

func parsePidEntry(line string) (PidEntry, error) {
	p, st, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok {
		return PidEntry{}, fmt.Errorf("pid line %q: want \"pid starttime\"", line)
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return PidEntry{}, fmt.Errorf("pid line %q: bad pid", line)
	}
	start, err := strconv.ParseUint(st, 10, 64)
	if err != nil {
		return PidEntry{}, fmt.Errorf("pid line %q: bad start time", line)
	}
	return PidEntry{Pid: pid, StartTime: start}, nil
}

// ReadPidFile reads a pid file that the setsid_child and daemon operations
// append to: one "pid starttime" line per process.
func ReadPidFile(path string) ([]PidEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []PidEntry
	for line := range strings.Lines(string(b)) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		e, err := parsePidEntry(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, outsidePid(e))
	}
	return out, nil
}

// outsidePid translates the entry of a process that wrote its pid from
// inside a PID namespace of its own (a confined agent's) into the pid
// this process sees: the one whose innermost pid (NSpid's last) and start
// time are e's. An entry already naming a live process, or naming none
// that lives, is returned as it is.
func outsidePid(e PidEntry) PidEntry {
	if Alive(e) {
		return e
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return e
	}
	inner := strconv.Itoa(e.Pid)
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == e.Pid {
			continue
		}
		st, err := ReadProcStat(pid)
		if err != nil || st.StartTime != e.StartTime {
			continue
		}
		status, err := os.ReadFile("/proc/" + ent.Name() + "/status")
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(status)) {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(rest)
				if len(f) > 1 && f[len(f)-1] == inner {
					return PidEntry{Pid: pid, StartTime: e.StartTime}
				}
			}
		}
	}
	return e
}

// appendPidFile appends e's line to the pid file at path in one write.
func appendPidFile(path string, e PidEntry) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(e.String() + "\n")
	return errors.Join(err, f.Close())
}

// Alive reports whether the process e names still runs: /proc/<pid>/stat
// exists, is not a zombie's, and has e's start time.
func Alive(e PidEntry) bool {
	st, err := ReadProcStat(e.Pid)
	// A zombie has exited; so has one the kernel is reaping (X, dead),
	// which a reader can catch between its exit and its removal.
	return err == nil && st.State != 'Z' && st.State != 'X' && st.State != 'x' && st.StartTime == e.StartTime
}

// Kill sends SIGKILL to the process e names, if it is still that process,
// and waits up to timeout for it to exit. A process already gone, or a pid
// now used by another process, is not an error; one still alive after
// timeout is. The process is held through a pidfd, so a recycled pid is
// never signalled.
func Kill(e PidEntry, timeout time.Duration) error {
	fd, err := unix.PidfdOpen(e.Pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill %d: pidfd_open: %w", e.Pid, err)
	}
	defer unix.Close(fd)
	// If the pid shows e's start time now, after the open, it was e's
	// process at the open too (a later process cannot precede it), so the
	// pidfd refers to it, and signals through it reach no other process.
	if !Alive(e) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %d: %w", e.Pid, err)
	}
	// A pidfd polls readable once its process has exited.
	deadline := time.Now().Add(timeout)
	for {
		wait := time.Until(deadline)
		if wait < 0 {
			wait = 0
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(wait.Milliseconds()))
		switch {
		case err == nil && n > 0:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("kill %d: poll: %w", e.Pid, err)
		}
		if !Alive(e) {
			return nil
		}
		return fmt.Errorf("kill %d: still alive after %v", e.Pid, timeout)
	}
}
