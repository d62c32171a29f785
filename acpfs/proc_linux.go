package acpfs

import (
	"errors"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr puts a terminal's command in its own process group and kills
// it if the daemon thread that started it dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitExited blocks until the process pid has exited, without reaping it:
// while the zombie stays, its pid and process group id cannot be reused, so
// signalling the group stays safe until the caller reaps it.
func waitExited(pid int) error {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// killGroup sends SIGKILL to every process of the group pgid. A group that
// no longer exists is not an error.
func killGroup(pgid int) error {
	if pgid <= 1 {
		return errors.New("refusing to signal process group " + strconv.Itoa(pgid))
	}
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// signalName names s the way ACP clients report it ("SIGKILL").
func signalName(s syscall.Signal) string {
	if name := unix.SignalName(s); name != "" {
		return name
	}
	return "SIG" + strconv.Itoa(int(s))
}
