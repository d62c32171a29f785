package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
)

// userHZ is the kernel's USER_HZ, the unit of the times in
// /proc/self/stat: 100 on every architecture Go runs Linux on (procfs,
// and so client_golang, assume the same).
const userHZ = 100

// collectProcess adds the process metrics of client_golang's process
// collector, read from /proc/self and getrlimit. A metric it cannot read
// is left out; the error says which.
func collectProcess(e *exposition) error {
	var errs []error
	if st, err := readProcStat(); err != nil {
		errs = append(errs, err)
	} else {
		e.counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", float64(st.utime+st.stime)/userHZ)
		e.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", float64(st.vsize))
		e.gauge("process_resident_memory_bytes", "Resident memory size in bytes.", float64(st.rss*uint64(os.Getpagesize())))
		if boot, err := readBootTime(); err != nil {
			errs = append(errs, err)
		} else {
			e.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", float64(boot)+float64(st.start)/userHZ)
		}
	}
	if n, err := countOpenFDs(); err != nil {
		errs = append(errs, err)
	} else {
		e.gauge("process_open_fds", "Number of open file descriptors.", float64(n))
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		errs = append(errs, fmt.Errorf("getrlimit nofile: %w", err))
	} else {
		e.gauge("process_max_fds", "Maximum number of open file descriptors.", float64(lim.Cur))
	}
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &lim); err != nil {
		errs = append(errs, fmt.Errorf("getrlimit as: %w", err))
	} else {
		e.gauge("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", float64(lim.Cur))
	}
	return errors.Join(errs...)
}

// procStat holds the fields of /proc/self/stat that the metrics use.
type procStat struct {
	utime, stime uint64 // CPU time, in USER_HZ ticks
	start        uint64 // start time after boot, in USER_HZ ticks
	vsize        uint64 // bytes
	rss          uint64 // pages
}

// readProcStat reads /proc/self/stat.
func readProcStat() (procStat, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return procStat{}, fmt.Errorf("read process stat: %w", err)
	}
	return parseProcStat(b)
}

// parseProcStat parses a proc/[pid]/stat line (proc(5)). The command
// name may hold spaces and parentheses, so fields are counted from its
// last ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("parse process stat: no command name")
	}
	// f[0] is field 3 (state), so field n is f[n-3].
	f := bytes.Fields(b[i+1:])
	if len(f) < 22 {
		return procStat{}, fmt.Errorf("parse process stat: %d fields after the command name", len(f))
	}
	var st procStat
	for _, x := range []struct {
		dst   *uint64
		field int
	}{{&st.utime, 14}, {&st.stime, 15}, {&st.start, 22}, {&st.vsize, 23}, {&st.rss, 24}} {
		v, err := strconv.ParseUint(string(f[x.field-3]), 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("parse process stat field %d: %w", x.field, err)
		}
		*x.dst = v
	}
	return st, nil
}

// readBootTime reads the boot time, in seconds since the epoch, from the
// btime line of /proc/stat.
func readBootTime() (uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read boot time: %w", err)
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			t, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse boot time: %w", err)
			}
			return t, nil
		}
	}
	return 0, errors.New("parse boot time: no btime line in /proc/stat")
}

// countOpenFDs counts the entries of /proc/self/fd, the descriptor that
// reads it included (as procfs counts it).
func countOpenFDs() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("count open fds: %w", err)
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(1024)
		n += len(names)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("count open fds: %w", err)
		}
	}
}
