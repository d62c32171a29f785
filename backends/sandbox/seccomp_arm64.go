package sandbox

import "golang.org/x/sys/unix"

// seccompArchDenied: arm64 has no architecture-specific call to refuse.
var seccompArchDenied []uintptr

// seccompArchCheck: arm64 has a single ABI.
var seccompArchCheck []unix.SockFilter

func seccompArch() (uint32, bool) { return unix.AUDIT_ARCH_AARCH64, true }
