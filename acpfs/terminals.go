package acpfs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// Defaults of TerminalsConfig.
const (
	// DefaultMaxRunning is how many terminals may run at once per Terminals.
	DefaultMaxRunning = 3
	// DefaultOutputCap is the server-side cap on a terminal's retained
	// output, in bytes, whatever the agent asks for: 1 MiB.
	DefaultOutputCap = 1 << 20
	// DefaultTerminalTimeout is the wall-clock limit of one command.
	DefaultTerminalTimeout = 10 * time.Minute
	// DefaultMaxRetained is how many terminals, running or exited but not
	// released, one Terminals keeps.
	DefaultMaxRetained = 16
	// DefaultMaxRetainedOutput bounds the output the kept terminals may
	// hold together: 32 MiB.
	DefaultMaxRetainedOutput = 32 << 20
)

// Terminal event types, as in TerminalEvent.Type.
const (
	EventTerminalCreated = "terminal.created"
	EventTerminalExited  = "terminal.exited"
)

// Log attribute keys.
const (
	logKeyTerminal = "terminal"
	logKeyPID      = "pid"
	logKeyCommand  = "command"
	logKeyExit     = "exit"
)

// TerminalsConfig configures a Terminals.
type TerminalsConfig struct {
	// Root is the worktree: the default cwd, and the bound of a given cwd.
	// Required unless Guard is set.
	Root string
	// Guard checks cwds. Optional: when nil, one is opened on Root and
	// closed with the Terminals. A Guard given here (e.g. FS.Guard()) is not
	// closed by the Terminals and must stay open as long as it.
	Guard *Guard
	// MaxRunning caps the terminals running at once (0 = DefaultMaxRunning).
	MaxRunning int
	// OutputCap caps the output kept per terminal, in bytes, even when the
	// agent asks for more (0 = DefaultOutputCap).
	OutputCap int
	// MaxRetained caps the terminals kept, running or exited but not yet
	// released (0 = DefaultMaxRetained).
	MaxRetained int
	// MaxRetainedOutput caps the sum of the output limits of the kept
	// terminals, in bytes (0 = DefaultMaxRetainedOutput). Each terminal
	// reserves its limit (OutputCap, or less if the agent asked for less)
	// until it is released.
	MaxRetainedOutput int64
	// Timeout is the wall-clock limit of each command, after which its
	// process group is killed (0 = DefaultTerminalTimeout).
	Timeout time.Duration
	// Env is the base environment, "KEY=value" (nil = os.Environ() at
	// NewTerminals).
	Env []string
	// Logger receives debug and warning records (nil = slog.Default()).
	Logger *slog.Logger
	// NewJail, if set, confines each command: it is called with the
	// terminal's id before the command starts, and the Jail it returns
	// starts the command inside it, kills everything left in it once the
	// command exits or is killed, and is released when the command has been
	// reaped. A NewJail error refuses the terminal.
	NewJail func(id string) (Jail, error)
	// OnEvent, if set, receives terminal.created and terminal.exited. It is
	// called from Create and from the terminal's waiter goroutine, and must
	// not block for long.
	OnEvent func(TerminalEvent)

	// newTimer is the clock seam for Timeout (nil = a real timer).
	newTimer func(time.Duration) (<-chan time.Time, func() bool)
}

// Jail confines a terminal's command and everything it starts (a cgroup of
// its own, Landlock rules). Prepare rewrites the unstarted command so that it
// starts inside the jail; Kill SIGKILLs every process in it; Release kills
// what is left and removes the jail, and is idempotent.
type Jail interface {
	Prepare(cmd *exec.Cmd) error
	Kill() error
	Release() error
}

// EnvVar is one environment variable a terminal adds to the base env.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// TerminalRequest is an ACP terminal/create request.
type TerminalRequest struct {
	// Command is the program, or a whole shell line when Args is empty
	// (then run as /bin/sh -c if it has shell syntax or spaces).
	Command string
	// Args are the arguments; a program named without a slash is looked up
	// in the terminal's PATH.
	Args []string
	// Cwd is an absolute directory inside the worktree ("" = the root).
	Cwd string
	// Env adds to, or overrides, the base environment.
	Env []EnvVar
	// OutputByteLimit is how much output to keep, from the end (nil or
	// negative = the server cap; never more than the cap).
	OutputByteLimit *int
}

// ExitStatus is how a terminal's command ended: ExitCode when it exited,
// Signal (e.g. "SIGKILL") when a signal ended it.
type ExitStatus struct {
	ExitCode *int    `json:"exit_code,omitempty"`
	Signal   *string `json:"signal,omitempty"`
}

// TerminalOutput is the answer to terminal/output.
type TerminalOutput struct {
	// Output is the retained output, stdout and stderr interleaved.
	Output string
	// Truncated is true when output was dropped from the beginning.
	Truncated bool
	// Exit is nil while the command runs.
	Exit *ExitStatus
}

// TerminalEvent reports a terminal's creation or exit.
type TerminalEvent struct {
	Type     string        `json:"type"`
	ID       string        `json:"id"`
	Command  string        `json:"command"`
	Args     []string      `json:"args,omitempty"`
	Cwd      string        `json:"cwd"`
	PID      int           `json:"pid"`
	ExitCode *int          `json:"exit_code,omitempty"`
	Signal   *string       `json:"signal,omitempty"`
	Duration time.Duration `json:"duration,omitempty"`
	// Bytes is all the output the command produced, kept or not.
	Bytes int64 `json:"bytes,omitempty"`
	// TimedOut is true when the wall-clock limit killed the command.
	TimedOut bool `json:"timed_out,omitempty"`
}

// Terminals runs the terminal/* commands of one backend. It is safe for
// concurrent use. Each command runs in its own process group; Close kills
// every group and waits for every goroutine it started.
type Terminals struct {
	cfg      TerminalsConfig
	guard    *Guard
	ownGuard bool
	log      *slog.Logger

	mu      sync.Mutex
	terms   map[string]*terminal
	running int
	// reserved is the sum of the output limits of terms.
	reserved int64
	next     uint64
	closed   bool

	wg sync.WaitGroup
}

// NewTerminals returns a Terminals for the worktree of cfg.
func NewTerminals(cfg TerminalsConfig) (*Terminals, error) {
	if cfg.MaxRunning == 0 {
		cfg.MaxRunning = DefaultMaxRunning
	}
	if cfg.OutputCap == 0 {
		cfg.OutputCap = DefaultOutputCap
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTerminalTimeout
	}
	if cfg.MaxRetained == 0 {
		cfg.MaxRetained = DefaultMaxRetained
	}
	if cfg.MaxRetainedOutput == 0 {
		cfg.MaxRetainedOutput = DefaultMaxRetainedOutput
	}
	switch {
	case cfg.MaxRunning < 0:
		return nil, fmt.Errorf("terminals: negative max running %d", cfg.MaxRunning)
	case cfg.OutputCap < 0:
		return nil, fmt.Errorf("terminals: negative output cap %d", cfg.OutputCap)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("terminals: negative timeout %v", cfg.Timeout)
	case cfg.MaxRetained < 0 || cfg.MaxRetainedOutput < 0:
		return nil, fmt.Errorf("terminals: negative retention limit %d, %d", cfg.MaxRetained, cfg.MaxRetainedOutput)
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.newTimer == nil {
		cfg.newTimer = func(d time.Duration) (<-chan time.Time, func() bool) {
			tm := time.NewTimer(d)
			return tm.C, tm.Stop
		}
	}
	t := &Terminals{cfg: cfg, guard: cfg.Guard, log: cfg.Logger, terms: make(map[string]*terminal)}
	if t.log == nil {
		t.log = slog.Default()
	}
	if t.guard == nil {
		g, err := NewGuard(cfg.Root)
		if err != nil {
			return nil, fmt.Errorf("terminals: %w", err)
		}
		t.guard, t.ownGuard = g, true
	}
	return t, nil
}

// Create starts a command and returns its terminal id at once. ctx bounds
// only the creation, not the command, which runs until it exits, is killed,
// times out, or the Terminals closes. Errors wrap the Guard's errors for the
// cwd, ErrNotFound (a missing cwd), ErrNotDirectory, ErrTooManyTerminals,
// ErrRetentionLimit (too many terminals, or too much output, kept unreleased),
// ErrClosed or the error of ctx's Authorizer (ErrPermissionDenied), or say
// why the command could not be found or started.
func (t *Terminals) Create(ctx context.Context, req TerminalRequest) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("create terminal: %w", err)
	}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return "", fmt.Errorf("create terminal: %w", ErrClosed)
	}
	env, err := mergeEnv(t.cfg.Env, req.Env)
	if err != nil {
		return "", err
	}
	path, args, err := command(req, env)
	if err != nil {
		return "", err
	}
	dir, cwd, err := t.cwd(req.Cwd)
	if err != nil {
		return "", err
	}
	// dir stays open until the command has started in it.
	defer dir.Close()
	if err := authorize(ctx, Access{Op: OpTerminal, Path: req.Cwd, Rel: t.relCwd(cwd), Command: req.Command, Args: req.Args}); err != nil {
		return "", fmt.Errorf("create terminal: %w", err)
	}
	limit := t.cfg.OutputCap
	if l := req.OutputByteLimit; l != nil && *l >= 0 && *l < limit {
		limit = *l
	}

	term, err := t.register(req, launch{path: path, args: args, dir: dir, cwd: cwd, env: env, limit: limit})
	if err != nil {
		return "", err
	}
	t.log.Debug("terminal created", logKeyTerminal, term.id, logKeyPID, term.pid, logKeyCommand, req.Command)
	t.emit(TerminalEvent{
		Type: EventTerminalCreated, ID: term.id, Command: req.Command, Args: req.Args,
		Cwd: cwd, PID: term.pid,
	})
	close(term.announced)
	return term.id, nil
}

// launch is what Create resolved of a TerminalRequest.
type launch struct {
	path string
	args []string
	// dir is the opened cwd the command starts in; cwd is its absolute
	// path, for events only.
	dir   *os.File
	cwd   string
	env   []string
	limit int
}

// register starts the command under the lock, so that Close cannot miss a
// process being started, and records it.
func (t *Terminals) register(req TerminalRequest, l launch) (*terminal, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return nil, fmt.Errorf("create terminal: %w", ErrClosed)
	case t.running >= t.cfg.MaxRunning:
		return nil, fmt.Errorf("create terminal %q: %d running: %w", req.Command, t.running, ErrTooManyTerminals)
	case len(t.terms) >= t.cfg.MaxRetained:
		return nil, fmt.Errorf("create terminal %q: %d terminals not released (limit %d): %w",
			req.Command, len(t.terms), t.cfg.MaxRetained, ErrRetentionLimit)
	case t.reserved+int64(l.limit) > t.cfg.MaxRetainedOutput:
		return nil, fmt.Errorf("create terminal %q: %d bytes of output kept by terminals not released, %d more would pass the limit of %d: %w",
			req.Command, t.reserved, l.limit, t.cfg.MaxRetainedOutput, ErrRetentionLimit)
	}
	t.next++
	id := "term-" + strconv.FormatUint(t.next, 10)
	term, err := t.startLocked(id, req, l)
	if err != nil {
		return nil, err
	}
	t.terms[id] = term
	t.running++
	t.reserved += int64(l.limit)
	return term, nil
}

// Output returns the retained output of terminal id and, once the command
// ended, its exit status.
func (t *Terminals) Output(id string) (TerminalOutput, error) {
	term, err := t.lookup(id)
	if err != nil {
		return TerminalOutput{}, err
	}
	out, truncated := term.out.String()
	return TerminalOutput{Output: out, Truncated: truncated, Exit: term.exitStatus()}, nil
}

// WaitForExit waits until terminal id's command has ended and returns how.
// A cancelled ctx returns ctx's error, wrapped, and leaves the command alone.
func (t *Terminals) WaitForExit(ctx context.Context, id string) (ExitStatus, error) {
	term, err := t.lookup(id)
	if err != nil {
		return ExitStatus{}, err
	}
	select {
	case <-term.exited:
		return *term.exitStatus(), nil
	case <-ctx.Done():
		return ExitStatus{}, fmt.Errorf("wait for terminal %q: %w", id, ctx.Err())
	}
}

// Kill kills terminal id's whole process group. The id stays valid for
// Output and WaitForExit until Release.
func (t *Terminals) Kill(id string) error {
	term, err := t.lookup(id)
	if err != nil {
		return err
	}
	if err := term.kill(); err != nil {
		return fmt.Errorf("kill terminal %q: %w", id, err)
	}
	return nil
}

// Release kills terminal id's process group if it still runs, waits until
// the command is reaped, and invalidates the id.
func (t *Terminals) Release(id string) error {
	t.mu.Lock()
	term, ok := t.terms[id]
	if ok {
		delete(t.terms, id)
		t.reserved -= int64(term.out.limit)
	}
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("release terminal %q: %w", id, ErrUnknownTerminal)
	}
	err := term.kill()
	<-term.done
	if err != nil {
		return fmt.Errorf("release terminal %q: %w", id, err)
	}
	return nil
}

// Close kills the process group of every terminal not yet released, waits
// for all goroutines, and closes the Guard if the Terminals opened it.
// Close may be called more than once; later calls return nil.
func (t *Terminals) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		return nil
	}
	t.closed = true
	terms := make([]*terminal, 0, len(t.terms))
	for _, term := range t.terms {
		terms = append(terms, term)
	}
	clear(t.terms)
	t.reserved = 0
	t.mu.Unlock()
	for _, term := range terms {
		if err := term.kill(); err != nil {
			t.log.Warn("kill terminal", logKeyTerminal, term.id, "error", err)
		}
	}
	t.wg.Wait()
	if t.ownGuard {
		return t.guard.Close()
	}
	return nil
}

// lookup returns the live terminal id.
func (t *Terminals) lookup(id string) (*terminal, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	term, ok := t.terms[id]
	if !ok {
		return nil, fmt.Errorf("terminal %q: %w", id, ErrUnknownTerminal)
	}
	return term, nil
}

// emit passes ev to cfg.OnEvent.
func (t *Terminals) emit(ev TerminalEvent) {
	if t.cfg.OnEvent != nil {
		t.cfg.OnEvent(ev)
	}
}
