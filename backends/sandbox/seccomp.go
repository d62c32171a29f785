package sandbox

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompDenied are the system calls a confined program is refused
// (EPERM), on top of its namespaces, Landlock and the lack of any
// capability: each opens a large part of the kernel to it and none is
// needed to write code — kernel modules and kexec, eBPF and perf events,
// userfaultfd (a common exploit primitive), the kernel keyring, the new
// and old mount APIs, file handles (open_by_handle_at reaches files
// outside a view), io_uring (which bypasses much of what filters system
// calls; libuv and others fall back to threads), the clock, swap, quotas,
// accounting and the kernel log. Architecture-specific ones are added by
// seccompArchDenied.
var seccompDenied = []uintptr{
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT,
	unix.SYS_FSPICK, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT, unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_SYSLOG,
	unix.SYS_VHANGUP,
}

// seccompData offsets (struct seccomp_data).
const (
	seccompDataNr   = 0
	seccompDataArch = 4
)

// seccompFilter is the BPF program: a foreign architecture (or the x32
// ABI) is refused, a denied call gets EPERM, anything else runs.
func seccompFilter() ([]unix.SockFilter, error) {
	arch, ok := seccompArch()
	if !ok {
		return nil, errors.New("seccomp: no filter for this architecture")
	}
	denied := append(append([]uintptr(nil), seccompDenied...), seccompArchDenied...)
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	eperm := stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	allow := stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
	prog := []unix.SockFilter{
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, seccompDataArch),
		jump(arch, 1, 0),
		stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_KILL_PROCESS),
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, seccompDataNr),
	}
	prog = append(prog, seccompArchCheck...)
	// Each denied number jumps to the EPERM at the end: n entries, then
	// allow, then eperm.
	for i, nr := range denied {
		prog = append(prog, jump(uint32(nr), uint8(len(denied)-i), 0))
	}
	prog = append(prog, allow, eperm)
	if len(prog) > 255 {
		return nil, fmt.Errorf("seccomp: filter of %d instructions", len(prog))
	}
	return prog, nil
}

// applySeccomp installs the filter on the calling thread, which the
// program it starts inherits. No-new-privs must be set already.
func applySeccomp() error {
	prog, err := seccompFilter()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}
