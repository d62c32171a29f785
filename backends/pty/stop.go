package pty

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Stop ends the program: it hangs up the terminal (closing our end sends
// SIGHUP), waits StopGrace, sends SIGTERM to the program's session and
// process group, waits KillGrace, then SIGKILL. Whatever is left of the
// session when the program exits is killed too. Stop returns once the
// program has been reaped and the backend's goroutines have ended; when ctx
// ends first it kills at once and reports ctx's error. It is idempotent and
// safe to call concurrently, also during a turn (which then fails).
func (b *Backend) Stop(ctx context.Context) error {
	b.mu.Lock()
	b.stopping = true
	cmd := b.cmd
	first := !b.stopped
	b.stopped = true
	b.mu.Unlock()
	if cmd == nil {
		b.doneOnce.Do(func() { close(b.done) })
		return nil
	}
	pid := cmd.Process.Pid
	// A program that already exited is left to supervise, which lets the
	// reader drain its last output before closing the terminal.
	if first && !b.hasExited() {
		b.ladder(ctx, pid)
	}
	select {
	case <-b.done:
		if ctx.Err() != nil {
			// The ladder, cut short by ctx, killed the program and saw it
			// end: that is still a stop the context did not allow for.
			return fmt.Errorf("stop agent %q: %w", b.cfg.Spec.Provider, ctx.Err())
		}
		return nil
	case <-ctx.Done():
		if !b.hasExited() {
			killSession(pid)
			if b.cfg.Jail != nil {
				_ = b.cfg.Jail.Kill()
			}
		}
		<-b.done
		return fmt.Errorf("stop agent %q: %w", b.cfg.Spec.Provider, ctx.Err())
	}
}

func (b *Backend) ladder(ctx context.Context, pid int) {
	b.closeMaster()
	if b.waitProc(ctx, b.cfg.StopGrace) {
		return
	}
	b.logger.Debug("hang-up ignored, sending SIGTERM", logKeyPID, pid)
	signalSession(pid, syscall.SIGTERM)
	if b.waitProc(ctx, b.cfg.KillGrace) {
		return
	}
	b.logger.Debug("SIGTERM ignored, sending SIGKILL", logKeyPID, pid)
	killSession(pid)
	if b.cfg.Jail != nil {
		_ = b.cfg.Jail.Kill()
	}
}

// waitProc waits up to d for the process to be reaped; false when it was
// not, or ctx ended.
func (b *Backend) waitProc(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.procDone:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// killSession sends SIGKILL to every process of session sid and of process
// group sid. The caller makes sure sid is not a recycled id: its leader is
// alive or not yet reaped.
func killSession(sid int) { signalSession(sid, syscall.SIGKILL) }

// sweepSession kills what is left of session sid and waits, up to
// sweepWait, until /proc shows none of it alive: a kill is delivered
// before its target is gone.
func sweepSession(sid int) {
	deadline := time.Now().Add(sweepWait)
	for {
		killSession(sid)
		if len(SessionMembers(sid)) == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(sweepPoll)
	}
}

func signalSession(sid int, sig syscall.Signal) {
	if sid <= 1 {
		return
	}
	_ = syscall.Kill(-sid, sig)
	self := os.Getpid()
	for _, pid := range SessionMembers(sid) {
		if pid != self {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// SessionMembers lists the pids of live (non-zombie) processes whose
// session or process group is sid, by scanning /proc. A program on a
// terminal runs as the leader of its own session; its jobs may sit in other
// process groups of that session (a shell with job control), which a
// group-wide signal alone would miss.
func SessionMembers(sid int) []int {
	var out []int
	for _, st := range backends.Processes() {
		if st.Live() && (st.PGID == sid || st.Session == sid) {
			out = append(out, st.PID)
		}
	}
	return out
}
