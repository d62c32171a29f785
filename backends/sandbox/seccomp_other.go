//go:build !amd64 && !arm64

package sandbox

import "golang.org/x/sys/unix"

var seccompArchDenied []uintptr

var seccompArchCheck []unix.SockFilter

// seccompArch: no filter is built for other architectures; the launcher
// says so and the program runs without one.
func seccompArch() (uint32, bool) { return 0, false }
