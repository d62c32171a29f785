package pty

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/backends"
)

// Start runs the program on a new terminal in the worktree and waits until
// it is ready for input: its screen matches the ready pattern, or it stayed
// quiet for the quiet window. A non-empty resume starts it with
// Spec.PTY.ResumeArgs instead of Args when the provider has them (Info.Resumed);
// without them the program starts afresh and Info.ContextLost says so.
// With ResumeArgs, Info.AgentSessionID is a token for the pool to hand back
// as resume after a crash (any non-empty resume selects ResumeArgs). ctx
// bounds the startup only; on failure the program is stopped and the error
// carries its exit status and the last lines of its screen.
func (b *Backend) Start(ctx context.Context, resume string) (backends.Info, error) {
	spec := b.cfg.Spec
	args, resumed, lost := spec.Args, false, false
	if resume != "" {
		if len(spec.PTY.ResumeArgs) > 0 {
			args, resumed = spec.PTY.ResumeArgs, true
		} else {
			lost = true
		}
	}
	b.mu.Lock()
	switch {
	case b.started:
		b.mu.Unlock()
		return backends.Info{}, fmt.Errorf("start agent %q: already started", spec.Provider)
	case b.stopping:
		b.mu.Unlock()
		return backends.Info{}, fmt.Errorf("start agent %q: %w", spec.Provider, backends.ErrExited)
	}
	// The emulator and the watch exist before the process, so its very
	// first output is rendered and checked.
	w := newWatch(b.watchSpec(false, false))
	b.termMu.Lock()
	b.scr = newScreen(spec.PTY.Cols, spec.PTY.Rows, replyWriter{b})
	b.watch = w
	b.termMu.Unlock()
	b.started = true
	// Spawning under mu means Stop sees either no process or a complete one.
	master, cmd, err := spawn(spec, args, b.cfg.Jail)
	if err != nil {
		b.fatal = err
		b.mu.Unlock()
		w.stop()
		b.doneOnce.Do(func() { close(b.done) })
		return backends.Info{}, fmt.Errorf("start agent %q: %w", spec.Provider, err)
	}
	pid := cmd.Process.Pid
	b.cmd, b.master = cmd, master
	b.info = backends.Info{Provider: spec.Provider, Kind: backends.KindPTY, PID: pid, PGID: pid, StartedAt: b.now(), Resumed: resumed, ContextLost: lost}
	if b.cfg.Jail != nil {
		b.info.Confinement = b.cfg.Jail.Describe()
	}
	b.info.StartTicks, _ = backends.ProcStartTicks(pid)
	if len(spec.PTY.ResumeArgs) > 0 {
		// The pool hands this back as the resume token after a crash.
		b.info.AgentSessionID = "pty-" + strconv.Itoa(pid) + "-" + strconv.FormatUint(b.info.StartTicks, 10)
	}
	b.mu.Unlock()
	if signal.Ignored(syscall.SIGINT) {
		b.logger.Warn("SIGINT is ignored by this process and so by the program: Ctrl-C will not interrupt it", logKeyPID, pid)
	}

	readerDone := make(chan struct{})
	b.wg.Add(3)
	go b.readLoop(readerDone)
	go b.flushLoop()
	go b.answerLoop()
	go b.supervise(readerDone)

	select {
	case <-w.Ready():
	case <-b.procDone:
		return backends.Info{}, b.startFailed(errors.New("exited before it was ready"))
	case <-ctx.Done():
		return backends.Info{}, b.startFailed(fmt.Errorf("not ready: %w", context.Cause(ctx)))
	}
	b.disarm()
	b.mu.Lock()
	b.ready = true
	info := b.info
	b.mu.Unlock()
	if lost {
		b.logger.Warn("agent context lost", "reason", "the provider has no resume_args")
		b.emit(b.event(backends.EventAgentContextLost, map[string]string{
			"previous_session_id": resume, "reason": "the provider has no resume_args: started afresh",
		}))
	}
	return info, nil
}

// spawn starts the program on a new pseudo-terminal as the leader of a new
// session with the terminal as its controlling tty, and returns our end.
func spawn(spec backends.Spec, args []string, jail backends.Jail) (*os.File, *exec.Cmd, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	defer func() { _ = tty.Close() }()
	master, err := pollable(ptmx)
	if err != nil {
		return nil, nil, err
	}
	ws := &unix.Winsize{Col: uint16(spec.PTY.Cols), Row: uint16(spec.PTY.Rows)}
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, ws); err != nil {
		_ = master.Close()
		return nil, nil, fmt.Errorf("set terminal size: %w", err)
	}
	cmd := exec.Command(spec.Path, args...)
	// The terminal's type, unless the provider's env says otherwise.
	withTerm := spec
	withTerm.Env = append([]string{"TERM=" + Term}, spec.Env...)
	cmd.Env = backends.AgentEnv(withTerm)
	cmd.Dir = spec.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	if jail != nil {
		if err := jail.Prepare(cmd); err != nil {
			_ = master.Close()
			_ = jail.Release()
			return nil, nil, fmt.Errorf("start %s: confine: %w", spec.Path, err)
		}
	}
	if err := cmd.Start(); err != nil {
		_ = master.Close()
		if jail != nil {
			_ = jail.Release()
		}
		return nil, nil, fmt.Errorf("start %s: %w", spec.Path, err)
	}
	return master, cmd, nil
}

// pollable replaces the master from pty.Open, which its ioctls left in
// blocking mode, by a non-blocking duplicate that the runtime poller
// serves: its reads can then be interrupted by Close (so closing it
// really hangs up the terminal) and its writes can have deadlines.
func pollable(ptmx *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(ptmx.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	_ = ptmx.Close()
	if err != nil {
		return nil, fmt.Errorf("dup pty master: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("pty master non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

// startFailed stops the program and explains why the start failed.
func (b *Backend) startFailed(cause error) error {
	provider := b.cfg.Spec.Provider
	b.mu.Lock()
	if b.fatal == nil {
		b.fatal = fmt.Errorf("start agent %q: %w", provider, cause)
	}
	b.mu.Unlock()
	stopCtx, cancel := context.WithTimeout(context.Background(), b.cfg.StopGrace+b.cfg.KillGrace+2*readerDrainWait)
	defer cancel()
	_ = b.Stop(stopCtx)
	b.mu.Lock()
	ee := b.exitErr
	b.mu.Unlock()
	if ee != nil {
		return fmt.Errorf("start agent %q: %w: %w", provider, cause, ee)
	}
	return fmt.Errorf("start agent %q: %w", provider, cause)
}

// supervise is the only waiter of the process. When the leader exits it
// kills what is left of its session before reaping it (so the session id
// cannot be reused meanwhile), lets the reader drain the terminal, stops the
// other goroutines and publishes the exit.
func (b *Backend) supervise(readerDone chan struct{}) {
	pid := b.cmd.Process.Pid
	waitExited(pid)
	sweepSession(pid)
	if b.cfg.Jail != nil {
		// Whatever left the session (setsid, double fork) is in the jail.
		if err := b.cfg.Jail.Kill(); err != nil {
			b.logger.Warn("kill the program's jail", "err", err)
		}
	}
	werr := b.cmd.Wait()
	if b.cfg.Jail != nil {
		if err := b.cfg.Jail.Release(); err != nil {
			b.logger.Warn("release the program's jail", "err", err)
		}
	}
	close(b.procDone)
	select {
	case <-readerDone:
	case <-time.After(readerDrainWait):
		// Something outside the session still holds the terminal open.
	}
	b.closeMaster()
	close(b.quit)
	b.wg.Wait()

	b.termMu.Lock()
	b.exited = true
	tail := b.scr.tail(screenTailLines)
	for a := range b.viewers {
		b.dropViewerLocked(a, backends.ErrExited)
	}
	if b.watch != nil {
		b.watch.stop()
	}
	b.termMu.Unlock()

	status := "exited"
	if st := b.cmd.ProcessState; st != nil {
		status = st.String()
	} else if werr != nil {
		status = werr.Error()
	}
	b.mu.Lock()
	ee := &backends.ExitError{PID: pid, Status: status, Expected: b.stopping || b.ownKill != nil, StderrTail: tail, Err: werr}
	b.exitErr = ee
	fatal, own := b.fatal, b.ownKill
	if fatal != nil && !errors.Is(fatal, ee) {
		b.fatal = errors.Join(fatal, ee)
	}
	b.mu.Unlock()
	data := backends.ExitData{PID: pid, Status: status, Expected: ee.Expected && fatal == nil, StderrTail: tail}
	var ev backends.Event
	switch {
	case fatal != nil:
		ev = b.event(backends.EventAgentExited, struct {
			backends.ExitData
			Error string `json:"error"`
		}{data, fatal.Error()})
	case own != nil:
		ev = b.event(backends.EventAgentExited, struct {
			backends.ExitData
			Reason string `json:"reason"`
		}{data, own.Error()})
	default:
		ev = b.event(backends.EventAgentExited, data)
	}
	// Like the ACP backend, the exit goes to OnEvent even during a turn.
	ev.Time = b.now()
	b.emitMu.Lock()
	b.cfg.OnEvent(ev)
	b.emitMu.Unlock()
	b.doneOnce.Do(func() { close(b.done) })
}

// waitExited blocks until pid has exited, without reaping it.
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// closeMaster closes our end of the terminal: a hang-up for the program.
func (b *Backend) closeMaster() {
	b.closeM.Do(func() {
		if b.master != nil {
			_ = b.master.Close()
		}
	})
}
