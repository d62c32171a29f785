package sandbox

import "golang.org/x/sys/unix"

// seccompArchDenied are the x86-only calls refused: port I/O and the
// uselib and vm86 relics.
var seccompArchDenied = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB}

// seccompArchCheck refuses the x32 ABI (numbers with bit 30 set), whose
// numbers would otherwise slip past the list: the accumulator holds the
// call's number.
var seccompArchCheck = []unix.SockFilter{
	{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, K: 0x40000000, Jt: 0, Jf: 1},
	{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
}

func seccompArch() (uint32, bool) { return unix.AUDIT_ARCH_X86_64, true }
