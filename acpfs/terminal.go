package acpfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// drainGrace is how long a terminal's output pipe may stay open after its
// command exited (a background child still holding it) before the rest of
// the process group is killed, and how long the reader then has to finish.
const drainGrace = 250 * time.Millisecond

// readChunk is the size of one read from a terminal's output pipe.
const readChunk = 32 << 10

// terminal is one running or finished command.
type terminal struct {
	id  string
	cmd *exec.Cmd
	pid int // also the process group id
	out *tailBuffer
	// jail is the terminal's confinement, nil without one.
	jail Jail

	started   time.Time
	timedOut  bool          // written by the watchdog before it kills, read by the waiter after exited
	announced chan struct{} // closed once terminal.created was emitted
	exited    chan struct{} // closed once exit is set
	done      chan struct{} // closed when the waiter has reaped the command

	mu     sync.Mutex
	reaped bool // the leader was reaped: its process group id may be reused
	exit   *ExitStatus
}

// startLocked starts the command of terminal id with its output going to a
// pipe, and the reader, waiter and watchdog goroutines. t.mu is held.
func (t *Terminals) startLocked(id string, req TerminalRequest, l launch) (*terminal, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create terminal %q: %w", req.Command, err)
	}
	cmd := exec.Command(l.path, l.args...)
	// Never the path: the directory opened and checked by cwd.
	cmd.Dir = dirOf(l.dir)
	cmd.Env = l.env
	cmd.Stdout = pw
	cmd.Stderr = pw
	cmd.SysProcAttr = sysProcAttr()
	var jail Jail
	if t.cfg.NewJail != nil {
		if jail, err = t.cfg.NewJail(id); err != nil {
			pr.Close()
			pw.Close()
			return nil, fmt.Errorf("create terminal %q: confine: %w", req.Command, err)
		}
		if err := jail.Prepare(cmd); err != nil {
			pr.Close()
			pw.Close()
			_ = jail.Release()
			return nil, fmt.Errorf("create terminal %q: confine: %w", req.Command, err)
		}
	}
	err = cmd.Start()
	runtime.KeepAlive(l.dir) // open until the child has changed into it
	if err != nil {
		pr.Close()
		pw.Close()
		if jail != nil {
			_ = jail.Release()
		}
		return nil, fmt.Errorf("create terminal %q: %w", req.Command, err)
	}
	pw.Close()
	term := &terminal{
		id: id, cmd: cmd, pid: cmd.Process.Pid, out: &tailBuffer{limit: l.limit}, jail: jail,
		started:   time.Now(),
		announced: make(chan struct{}),
		exited:    make(chan struct{}),
		done:      make(chan struct{}),
	}
	timeout, stopTimer := t.cfg.newTimer(t.cfg.Timeout)
	readerDone := make(chan struct{})
	t.wg.Add(3)
	go t.read(term, pr, readerDone)
	go t.watch(term, timeout, stopTimer)
	go t.wait(term, req, l.cwd, pr, readerDone)
	return term, nil
}

// read copies the command's output into its buffer until the pipe ends.
func (t *Terminals) read(term *terminal, pr *os.File, done chan<- struct{}) {
	defer t.wg.Done()
	defer close(done)
	buf := make([]byte, readChunk)
	for {
		n, err := pr.Read(buf)
		term.out.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

// watch kills the command's process group when the timeout fires first.
func (t *Terminals) watch(term *terminal, timeout <-chan time.Time, stop func() bool) {
	defer t.wg.Done()
	select {
	case <-timeout:
		term.mu.Lock()
		term.timedOut = true
		term.mu.Unlock()
		t.log.Debug("terminal timed out", logKeyTerminal, term.id, logKeyPID, term.pid)
		if err := term.kill(); err != nil {
			t.log.Warn("kill timed-out terminal", logKeyTerminal, term.id, "error", err)
		}
	case <-term.exited:
		stop()
	}
}

// wait is the one goroutine that waits for the command. Once the leader has
// exited (still unreaped, so its group id cannot be reused) and its output is
// drained, it kills what is left of the group, reaps the leader, publishes
// the exit and emits terminal.exited.
func (t *Terminals) wait(term *terminal, req TerminalRequest, cwd string, pr *os.File, readerDone <-chan struct{}) {
	defer t.wg.Done()
	defer close(term.done)
	if err := waitExited(term.pid); err != nil {
		t.log.Warn("wait for terminal", logKeyTerminal, term.id, "error", err)
	} else {
		grace := time.NewTimer(drainGrace)
		select {
		case <-readerDone:
		case <-grace.C:
		}
		grace.Stop()
	}
	term.mu.Lock()
	if err := killGroup(term.pid); err != nil {
		t.log.Warn("kill terminal group", logKeyTerminal, term.id, "error", err)
	}
	if term.jail != nil {
		// Whatever left the group (setsid, double fork) is still in the
		// jail: end it before the output pipe is waited for.
		if err := term.jail.Kill(); err != nil {
			t.log.Warn("kill terminal jail", logKeyTerminal, term.id, "error", err)
		}
	}
	term.reaped = true
	term.mu.Unlock()
	// A process that left the group may still hold the pipe: bound the read.
	pr.SetReadDeadline(time.Now().Add(drainGrace))
	<-readerDone
	pr.Close()
	err := term.cmd.Wait()
	if term.jail != nil {
		if rerr := term.jail.Release(); rerr != nil {
			t.log.Warn("release terminal jail", logKeyTerminal, term.id, "error", rerr)
		}
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.log.Warn("reap terminal", logKeyTerminal, term.id, "error", err)
	}
	status := exitStatusOf(term.cmd.ProcessState)
	duration := time.Since(term.started)

	t.mu.Lock()
	t.running--
	t.mu.Unlock()
	term.mu.Lock()
	term.exit = &status
	timedOut := term.timedOut
	term.mu.Unlock()

	<-term.announced
	t.log.Debug("terminal exited", logKeyTerminal, term.id, logKeyExit, status.String())
	t.emit(TerminalEvent{
		Type: EventTerminalExited, ID: term.id, Command: req.Command, Args: req.Args,
		Cwd: cwd, PID: term.pid, ExitCode: status.ExitCode, Signal: status.Signal,
		Duration: duration, Bytes: term.out.Total(), TimedOut: timedOut,
	})
	close(term.exited)
}

// kill sends SIGKILL to the terminal's process group, unless the leader was
// already reaped (then the group is gone, and its id may belong to another).
func (term *terminal) kill() error {
	term.mu.Lock()
	defer term.mu.Unlock()
	if term.reaped {
		return nil
	}
	err := killGroup(term.pid)
	if term.jail != nil {
		if jerr := term.jail.Kill(); err == nil {
			err = jerr
		}
	}
	return err
}

// exitStatus returns a copy of the exit status, nil while running.
func (term *terminal) exitStatus() *ExitStatus {
	term.mu.Lock()
	defer term.mu.Unlock()
	if term.exit == nil {
		return nil
	}
	e := *term.exit
	return &e
}

// exitStatusOf converts a reaped process's state.
func exitStatusOf(ps *os.ProcessState) ExitStatus {
	if ps == nil {
		return ExitStatus{}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		name := signalName(ws.Signal())
		return ExitStatus{Signal: &name}
	}
	code := ps.ExitCode()
	return ExitStatus{ExitCode: &code}
}

// String describes the status for logs.
func (s ExitStatus) String() string {
	switch {
	case s.Signal != nil:
		return "signal " + *s.Signal
	case s.ExitCode != nil:
		return fmt.Sprintf("exit %d", *s.ExitCode)
	}
	return "unknown"
}
