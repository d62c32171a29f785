package agenttest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// envReadyFD tells a setsid sleeper the descriptor on which to report its
// pid line (or "error: ...") once it is in place.
const envReadyFD = "AGENTPOOL_TEST_READY_FD"

// readyTimeout bounds the wait for a sleeper to report.
const readyTimeout = 10 * time.Second

// setsidSleeperMain is the HelperSetsidSleeper process: a session of its
// own, deaf to SIGTERM, SIGHUP and SIGINT, its pid line appended to the pid
// file args[0], then sleep.
func setsidSleeperMain(args []string) {
	ignoreTermSignals()
	var ready *os.File
	if os.Getenv(envReadyFD) == "3" {
		ready = os.NewFile(3, "ready")
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "setsid sleeper:", err)
		if ready != nil {
			fmt.Fprintln(ready, "error:", err)
		}
		os.Exit(1)
	}
	if len(args) != 1 {
		fail(errors.New("usage: pidfile"))
	}
	// A starter in this package has already made the session; a plain
	// start has not.
	if sid, _ := unix.Getsid(0); sid != os.Getpid() {
		if _, err := unix.Setsid(); err != nil {
			fail(fmt.Errorf("setsid: %w", err))
		}
	}
	e, err := selfEntry()
	if err != nil {
		fail(err)
	}
	if err := appendPidFile(args[0], e); err != nil {
		fail(err)
	}
	if ready != nil {
		fmt.Fprintln(ready, e)
		ready.Close()
	}
	for {
		time.Sleep(time.Hour)
	}
}

// daemonizeMain is the HelperDaemonize process: it starts a setsid sleeper
// that writes to the pid file args[0], prints the sleeper's pid line on
// stdout once it is written, and exits, orphaning the sleeper.
func daemonizeMain(args []string) {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "daemonize: usage: pidfile")
		os.Exit(2)
	}
	e, err := startSetsidSleeper(args[0], false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemonize:", err)
		os.Exit(1)
	}
	fmt.Println(e)
	os.Exit(0)
}

// startSetsidSleeper starts the test binary as a HelperSetsidSleeper in a
// new session, writing to pidfile (relative to the working directory), and
// returns its entry once the sleeper has written it. With stdio the sleeper
// inherits this process's stdin, stdout and stderr, holding them open;
// otherwise it has /dev/null. Nobody waits for the sleeper: a long-lived
// caller reaps it with a goroutine, an exiting one orphans it.
func startSetsidSleeper(pidfile string, stdio bool) (PidEntry, error) {
	abs, err := filepath.Abs(pidfile)
	if err != nil {
		return PidEntry{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return PidEntry{}, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return PidEntry{}, err
	}
	defer r.Close()
	cmd := exec.Command(exe, abs)
	cmd.Env = append(os.Environ(), EnvHelper+"="+HelperSetsidSleeper, envReadyFD+"=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if stdio {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return PidEntry{}, err
	}
	go func() { _ = cmd.Wait() }()
	_ = r.SetReadDeadline(time.Now().Add(readyTimeout))
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	line := strings.TrimSpace(string(b))
	switch {
	case err != nil:
		return PidEntry{}, fmt.Errorf("setsid sleeper %d: %w", cmd.Process.Pid, err)
	case strings.HasPrefix(line, "error: "):
		return PidEntry{}, fmt.Errorf("setsid sleeper %d: %s", cmd.Process.Pid, strings.TrimPrefix(line, "error: "))
	case line == "":
		return PidEntry{}, fmt.Errorf("setsid sleeper %d exited without writing its pid", cmd.Process.Pid)
	}
	return parsePidEntry(line)
}
