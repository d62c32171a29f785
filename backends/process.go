package backends

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Defaults of the stop ladder and the stderr tail.
const (
	DefaultStopGrace  = 2 * time.Second
	DefaultKillGrace  = 2 * time.Second
	DefaultTailLines  = 40
	maxStderrLineSize = 4096
	stderrDrainWait   = 250 * time.Millisecond
)

// ProcessConfig describes a child process to start.
type ProcessConfig struct {
	// Path is the absolute path of the executable.
	Path string
	// Args are the arguments after the program name.
	Args []string
	// Env is the complete environment; nil means the daemon's own.
	Env []string
	// Dir is the working directory.
	Dir string
	// StopGrace is how long Stop waits after closing stdin before SIGTERM.
	StopGrace time.Duration
	// KillGrace is how long Stop waits after SIGTERM before SIGKILL.
	KillGrace time.Duration
	// TailLines is how many stderr lines are kept for crash reports.
	TailLines int
	// Logger receives stderr lines at debug level.
	Logger *slog.Logger
	// Jail, if set, is where the process starts: Stop and the exit of the
	// leader end everything in it (whatever left the process group), and
	// it is released once the process has been reaped.
	Jail Jail
}

// Process is a child started in its own process group with a parent-death
// signal. Its stdin and stdout are pipes the caller reads and writes; its
// stderr is drained into a bounded tail. Exactly one goroutine waits for it.
type Process struct {
	cfg    ProcessConfig
	cmd    *exec.Cmd
	pid    int
	ticks  uint64
	stdin  *os.File // our write end
	stdout *os.File // our read end
	stderr *os.File // our read end
	tail   *Tail
	logger *slog.Logger

	done      chan struct{}
	drained   chan struct{}
	stopOnce  sync.Once
	stopDone  chan struct{}
	mu        sync.Mutex
	stopping  bool
	exitErr   error
	exitState *os.ProcessState
}

// StartProcess starts cfg.Path in its own process group (and cfg.Jail, if
// set, which it releases when it cannot start the process). The returned
// Process must be stopped with Stop; its pipes are closed by Stop or when the
// process exits.
func StartProcess(cfg ProcessConfig) (*Process, error) {
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if cfg.TailLines <= 0 {
		cfg.TailLines = DefaultTailLines
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd := exec.Command(cfg.Path, cfg.Args...)
	cmd.Env = cfg.Env
	cmd.Dir = cfg.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cfg.Jail != nil {
		if err := cfg.Jail.Prepare(cmd); err != nil {
			closeAll(inR, inW, outR, outW, errR, errW)
			_ = cfg.Jail.Release()
			return nil, fmt.Errorf("start %s: confine: %w", cfg.Path, err)
		}
	}
	if pj, ok := cfg.Jail.(PrestartJail); ok {
		// Its launcher, started early, runs cmd as Prepare left it.
		if pre, ok := pj.TakePrestart(cmd); ok {
			closeAll(inR, inW, outR, outW, errR, errW)
			return started(cfg, logger, pre), nil
		}
	}
	if err := cmd.Start(); err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		if cfg.Jail != nil {
			_ = cfg.Jail.Release()
		}
		return nil, fmt.Errorf("start %s: %w", cfg.Path, err)
	}
	// The child has its own copies; ours would keep the pipes open forever.
	closeAll(inR, outW, errW)
	return started(cfg, logger, Prestart{Cmd: cmd, Stdin: inW, Stdout: outR, Stderr: errR}), nil
}

// started is the Process of the started pre.Cmd, whose stdio pipes' other
// ends are pre's.
func started(cfg ProcessConfig, logger *slog.Logger, pre Prestart) *Process {
	pid := pre.Cmd.Process.Pid
	p := &Process{
		cfg:      cfg,
		cmd:      pre.Cmd,
		pid:      pid,
		stdin:    pre.Stdin,
		stdout:   pre.Stdout,
		stderr:   pre.Stderr,
		tail:     NewTail(cfg.TailLines, maxStderrLineSize),
		logger:   logger.With("pid", pid),
		done:     make(chan struct{}),
		drained:  make(chan struct{}),
		stopDone: make(chan struct{}),
	}
	p.ticks, _ = ProcStartTicks(p.pid)
	go p.drainStderr()
	go p.wait()
	return p
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// PID is the process id, also its process group id.
func (p *Process) PID() int { return p.pid }

// StartTicks is the process start time read from /proc, 0 if unknown.
func (p *Process) StartTicks() uint64 { return p.ticks }

// Stdin is the write end of the child's stdin. Writes may be given deadlines.
func (p *Process) Stdin() *os.File { return p.stdin }

// Stdout is the read end of the child's stdout.
func (p *Process) Stdout() *os.File { return p.stdout }

// Tail returns the last stderr lines.
func (p *Process) Tail() string { return p.tail.String() }

// Done is closed after the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stopping reports whether Stop has been called.
func (p *Process) Stopping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopping
}

// ExitError returns nil while the process runs; afterwards an *ExitError
// describing how it ended, with the stderr tail.
func (p *Process) ExitError() *ExitError {
	select {
	case <-p.done:
	default:
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return &ExitError{PID: p.pid, Status: exitStatus(p.exitState, p.exitErr), Expected: p.stopping, StderrTail: p.tail.String(), Err: p.exitErr}
}

func exitStatus(st *os.ProcessState, err error) string {
	if st != nil {
		return st.String()
	}
	if err != nil {
		return err.Error()
	}
	return "exited"
}

func (p *Process) drainStderr() {
	defer close(p.drained)
	buf := make([]byte, 32*1024)
	var line []byte
	for {
		n, err := p.stderr.Read(buf)
		chunk := buf[:n]
		for len(chunk) > 0 {
			i := indexByte(chunk, '\n')
			if i < 0 {
				line = appendCapped(line, chunk)
				break
			}
			line = appendCapped(line, chunk[:i])
			p.tail.Add(string(line))
			p.logger.Debug("agent stderr", "line", string(line))
			line = line[:0]
			chunk = chunk[i+1:]
		}
		if err != nil {
			if len(line) > 0 {
				p.tail.Add(string(line))
			}
			return
		}
	}
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func appendCapped(line, b []byte) []byte {
	room := maxStderrLineSize - len(line)
	if room <= 0 {
		return line
	}
	if len(b) > room {
		b = b[:room]
	}
	return append(line, b...)
}

// wait is the only caller of cmd.Wait. After the leader exits, it removes
// whatever is left of its process group, lets stderr finish draining for a
// moment, and closes the pipes it owns.
func (p *Process) wait() {
	err := p.cmd.Wait()
	_ = KillGroup(p.pid)
	p.killJail()
	// SIGKILL is delivered asynchronously: a member may still run for a
	// moment (TestStopRemovesGrandchild saw one under load). Stop
	// promises an empty group.
	waitGroupGone(p.pid, groupGoneWait)
	select {
	case <-p.drained:
	case <-time.After(stderrDrainWait):
		// A member that escaped the group may still hold stderr open.
		_ = p.stderr.Close()
		<-p.drained
	}
	_ = p.stderr.Close()
	_ = p.stdin.Close()
	if j := p.cfg.Jail; j != nil {
		if rerr := j.Release(); rerr != nil {
			p.logger.Warn("release the agent's jail", "err", rerr)
		}
	}
	p.mu.Lock()
	p.exitErr = err
	p.exitState = p.cmd.ProcessState
	p.mu.Unlock()
	close(p.done)
}

// Stop ends the process: close stdin, wait StopGrace, SIGTERM the group, wait
// KillGrace, SIGKILL the group. It returns once the process has been reaped
// and its group is empty, or when ctx ends (the ladder then goes on to
// SIGKILL at once). Stop is idempotent and safe to call concurrently.
func (p *Process) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	p.stopOnce.Do(func() { go p.ladder(ctx) })
	select {
	case <-p.stopDone:
		return nil
	case <-ctx.Done():
		_ = KillGroup(p.pid)
		p.killJail()
		<-p.stopDone
		return fmt.Errorf("stop pid %d: %w", p.pid, ctx.Err())
	}
}

func (p *Process) ladder(ctx context.Context) {
	defer close(p.stopDone)
	defer func() { _ = p.stdout.Close() }()
	_ = p.stdin.Close()
	if p.waitExit(ctx, p.cfg.StopGrace) {
		return
	}
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	if p.waitExit(ctx, p.cfg.KillGrace) {
		return
	}
	_ = KillGroup(p.pid)
	p.killJail()
	<-p.done
}

// killJail SIGKILLs everything in the process's jail, if it has one.
func (p *Process) killJail() {
	if j := p.cfg.Jail; j != nil {
		if err := j.Kill(); err != nil {
			p.logger.Warn("kill the agent's jail", "err", err)
		}
	}
}

func (p *Process) waitExit(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// ExitError reports how an agent process ended.
type ExitError struct {
	PID        int
	Status     string
	Expected   bool
	StderrTail string
	Err        error
}

// Error names the exit status and the last stderr lines.
func (e *ExitError) Error() string {
	msg := fmt.Sprintf("agent process %d exited: %s", e.PID, e.Status)
	if e.StderrTail != "" {
		msg += "; last stderr:\n" + e.StderrTail
	}
	return msg
}

// Unwrap returns the underlying wait error, if any.
func (e *ExitError) Unwrap() error { return e.Err }

// groupGoneWait bounds how long a process's end waits for the members of
// its group, SIGKILLed, to be gone (one in uninterruptible sleep can take
// longer; it is dead once it wakes).
const groupGoneWait = 2 * time.Second

// waitGroupGone waits, up to d, until group pgid has no live member.
func waitGroupGone(pgid int, d time.Duration) {
	for deadline := time.Now().Add(d); GroupAlive(pgid) && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
}

// KillGroup sends SIGKILL to every member of process group pgid. A group
// that no longer exists is not an error.
func KillGroup(pgid int) error {
	if pgid <= 1 {
		return fmt.Errorf("kill group %d: refusing", pgid)
	}
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill group %d: %w", pgid, err)
	}
	return nil
}

// GroupAlive reports whether any live (non-zombie) process is left in group
// pgid. Zombies are ignored: they hold no resources but their pid, and a
// grandchild reparented to a non-reaping init may stay one forever.
func GroupAlive(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	if err := syscall.Kill(-pgid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return len(GroupMembers(pgid)) > 0
}

var _ io.Closer = (*os.File)(nil)
