// Package pty is the backend for agents that have only a terminal
// interface (an interactive CLI such as claude or aider, or a shell). It
// runs the program on a pseudo-terminal in its own session, feeds
// everything the program writes through a terminal emulator, and decides
// from the rendered screen when the program waits for input: by the
// provider's ready pattern (a regular expression over the screen, checked
// after every chunk of output, so a turn ends within a millisecond of the
// prompt reappearing) or, without one, by a quiet window.
//
// A prompt is typed the way a person pastes it: as a bracketed paste when
// the program asked for bracketed paste mode, then Enter. The turn's events
// read like an ACP turn's: the raw output as coalesced, rate-bounded
// pty.output events, the text that appeared on the screen since the prompt
// as one message.chunk, and a pty.screen snapshot at the end.
//
// A person can take over the terminal: Attach streams the raw output,
// starting with a redraw of the current screen, to any number of viewers;
// one viewer at a time may type (TakeInput, Input) and resize it.
//
// Stop hangs up the terminal (closing the master sends SIGHUP), then sends
// SIGTERM and finally SIGKILL to the program's session and process group,
// so nothing it started outlives it.
package pty

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Defaults of Config.
const (
	// DefaultOutputInterval is how long raw output is coalesced into one
	// pty.output event.
	DefaultOutputInterval = 50 * time.Millisecond
	// DefaultOutputLimit bounds the bytes of one pty.output event; output
	// beyond it within one interval is counted as dropped, so the event
	// log grows by at most OutputLimit per OutputInterval.
	DefaultOutputLimit = 64 << 10
	// DefaultCancelGrace is how long the program may take to show its
	// ready prompt again after the cancel keys before it is stopped.
	DefaultCancelGrace = 5 * time.Second
	// DefaultWriteTimeout bounds each write to the terminal.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultSubmitDelay is the pause between the pasted text and Enter;
	// some TUIs swallow an Enter that arrives together with a paste.
	DefaultSubmitDelay = 50 * time.Millisecond
	// DefaultViewerBuffer is how many output chunks an attached viewer may
	// fall behind before it is dropped.
	DefaultViewerBuffer = 256
	// DefaultCancelKeys is Ctrl-C.
	DefaultCancelKeys = "\x03"
	// ClearInterval is how often the clear keys are sent after a cancel
	// while the screen is neither ready nor busy.
	ClearInterval = 200 * time.Millisecond
	// CancelSlack is added to Spec.PTY.CancelMinInterval: the program
	// reads the keys a little after they are written.
	CancelSlack = 100 * time.Millisecond
	// Term is the terminal type the program is told it runs in.
	Term = "xterm-256color"
	// MaxCols and MaxRows bound the terminal size.
	MaxCols = 1000
	MaxRows = 500

	readBufSize     = 32 << 10
	readerDrainWait = time.Second
	sweepWait       = 2 * time.Second
	sweepPoll       = 2 * time.Millisecond
	screenTailLines = 12
	logKeyAgent     = "agent"
	logKeyPID       = "pid"
)

// Config configures one PTY backend.
type Config struct {
	// Spec is the launch spec: Kind pty, Dir the absolute worktree path,
	// and Spec.PTY the terminal settings.
	Spec backends.Spec
	// BusyPattern is a regular expression over the rendered screen that
	// matches while the program works (claude: "esc to interrupt"). A busy
	// screen is never ready, and after a prompt a ready screen ends the
	// turn at once only once the busy pattern has been seen (otherwise
	// after staying ready and quiet for the quiet window). It is for
	// programs that keep their prompt on the screen while they work.
	BusyPattern string
	// OnEvent receives events that happen outside a turn: output while
	// idle, the exit, a lost context.
	OnEvent func(backends.Event)
	// Jail, if set, confines the program and everything it starts; the
	// backend releases it when the program has ended.
	Jail backends.Jail
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// StopGrace is how long Stop waits after the hang-up before SIGTERM,
	// and KillGrace how long after SIGTERM before SIGKILL.
	StopGrace, KillGrace time.Duration
	// OutputInterval coalesces raw output into pty.output events.
	OutputInterval time.Duration
	// OutputLimit bounds the bytes of one pty.output event.
	OutputLimit int
	// CancelGrace bounds the wait for the ready prompt after the cancel
	// keys (Cancel, a cancelled Prompt context, the turn deadline).
	CancelGrace time.Duration
	// WriteTimeout bounds each write to the terminal.
	WriteTimeout time.Duration
	// SubmitDelay is the pause between the pasted text and Enter; zero
	// means DefaultSubmitDelay and a negative value no pause.
	SubmitDelay time.Duration
	// ViewerBuffer is how many chunks a viewer may lag before it is dropped.
	ViewerBuffer int
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Errors returned by the backend.
var (
	// ErrTurnTimeout means the turn deadline passed.
	ErrTurnTimeout = errors.New("turn deadline passed")
	// ErrIgnoredCancel means the program did not show its ready prompt
	// again within the cancel grace after the cancel keys. The backend
	// then kills the program; that exit is its own doing, so it is
	// expected (Err is nil, agent.exited says expected) and the turn's
	// error carries ErrIgnoredCancel.
	ErrIgnoredCancel = errors.New("program ignored the cancel keys")
	// ErrNotWriter is returned by Input for a viewer that does not hold
	// the terminal input.
	ErrNotWriter = errors.New("viewer does not hold the terminal input")
	// ErrInputHeld is returned by TakeInput while another viewer holds the
	// input, and (wrapped with backends.ErrBusy) by Prompt while any
	// viewer holds it.
	ErrInputHeld = errors.New("another viewer holds the terminal input")
	// ErrSlowViewer is the Err of an Attachment dropped for falling behind.
	ErrSlowViewer = errors.New("viewer fell behind and was dropped")
	// ErrBadSize is returned by Resize for a size out of range.
	ErrBadSize = errors.New("terminal size out of range")
)

// Backend is one terminal program on a pseudo-terminal. Create it with New,
// then Start it.
//
// Locks are taken in the order mu, termMu, watch.mu and emitMu, outMu;
// cmd and master are set once, under mu, by Start.
type Backend struct {
	cfg     Config
	logger  *slog.Logger
	pattern *regexp.Regexp // nil: quiet window
	busy    *regexp.Regexp // nil: no busy indicator
	quiet   time.Duration
	cancel  []byte
	clear   []byte           // nil: no clear keys
	ignore  []*regexp.Regexp // chrome rows left out of replies
	now     func() time.Time

	cmd      *exec.Cmd
	master   *os.File
	closeM   sync.Once
	procDone chan struct{} // closed when the process has been reaped
	done     chan struct{} // closed when everything has ended
	doneOnce sync.Once
	wg       sync.WaitGroup
	quit     chan struct{} // stops the flusher and the answerer
	kick     chan struct{} // wakes the flusher
	replies  chan []byte   // emulator answers to terminal queries

	// termMu guards the emulator, the viewers and the readiness watch:
	// the reader feeds, fans out and checks under it in one step.
	termMu  sync.Mutex
	scr     *screen
	viewers map[*Attachment]struct{}
	watch   *watch
	exited  bool

	writeMu sync.Mutex  // serialises writes to the terminal
	held    atomic.Bool // a viewer holds the input (read by the reader)

	outMu      sync.Mutex
	outBuf     []byte
	outDropped int

	emitMu   sync.Mutex // orders events; guards turnEmit
	turnEmit func(backends.Event)

	mu       sync.Mutex
	info     backends.Info
	started  bool
	ready    bool // Start saw the program ready
	stopping bool
	stopped  bool // the stop ladder ran
	fatal    error
	ownKill  error // why the backend killed the program itself (an expected exit)
	exitErr  *backends.ExitError
	// lastCancel is when the cancel keys were last sent.
	lastCancel time.Time
	turn       *turnState
	writer     string // viewer holding the input
}

var _ backends.Backend = (*Backend)(nil)

// New returns an unstarted backend for cfg, with defaults filled in. It
// fails for a spec that cannot be launched or a ready pattern that does
// not compile.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Spec.Validate(); err != nil {
		return nil, err
	}
	if cfg.Spec.Kind != backends.KindPTY {
		return nil, fmt.Errorf("pty backend %q: spec kind is %q", cfg.Spec.Provider, cfg.Spec.Kind)
	}
	if cfg.Spec.Dir == "" {
		return nil, fmt.Errorf("pty backend %q: spec dir (the worktree) is empty", cfg.Spec.Provider)
	}
	p := &cfg.Spec.PTY
	if p.Cols <= 0 {
		p.Cols = backends.DefaultCols
	}
	if p.Rows <= 0 {
		p.Rows = backends.DefaultRows
	}
	if p.Cols > MaxCols || p.Rows > MaxRows {
		return nil, fmt.Errorf("pty backend %q: size %dx%d: %w", cfg.Spec.Provider, p.Cols, p.Rows, ErrBadSize)
	}
	if p.QuietWindow <= 0 {
		p.QuietWindow = backends.DefaultQuietWindow
	}
	if p.CancelKeys == "" {
		p.CancelKeys = DefaultCancelKeys
	}
	if cfg.OutputInterval <= 0 {
		cfg.OutputInterval = DefaultOutputInterval
	}
	if cfg.OutputLimit <= 0 {
		cfg.OutputLimit = DefaultOutputLimit
	}
	if cfg.CancelGrace <= 0 {
		cfg.CancelGrace = DefaultCancelGrace
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.SubmitDelay == 0 {
		cfg.SubmitDelay = DefaultSubmitDelay
	}
	if cfg.ViewerBuffer <= 0 {
		cfg.ViewerBuffer = DefaultViewerBuffer
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = backends.DefaultStopGrace
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = backends.DefaultKillGrace
	}
	if cfg.OnEvent == nil {
		cfg.OnEvent = func(backends.Event) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	b := &Backend{
		cfg:      cfg,
		logger:   logger.With(logKeyAgent, cfg.Spec.Provider),
		quiet:    p.QuietWindow,
		cancel:   []byte(p.CancelKeys),
		clear:    []byte(p.ClearKeys),
		now:      cfg.Now,
		procDone: make(chan struct{}),
		done:     make(chan struct{}),
		quit:     make(chan struct{}),
		kick:     make(chan struct{}, 1),
		replies:  make(chan []byte, 16),
		viewers:  map[*Attachment]struct{}{},
	}
	if p.ReadyPattern != "" {
		re, err := compilePattern(p.ReadyPattern)
		if err != nil {
			return nil, fmt.Errorf("pty backend %q: ready pattern: %w", cfg.Spec.Provider, err)
		}
		b.pattern = re
	}
	for _, expr := range p.IgnorePatterns {
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, fmt.Errorf("pty backend %q: ignore pattern: %w", cfg.Spec.Provider, err)
		}
		b.ignore = append(b.ignore, re)
	}
	if p.CancelMinInterval < 0 {
		return nil, fmt.Errorf("pty backend %q: cancel min interval %s is negative", cfg.Spec.Provider, p.CancelMinInterval)
	}
	if cfg.BusyPattern != "" {
		if b.pattern == nil {
			return nil, fmt.Errorf("pty backend %q: a busy pattern needs a ready pattern", cfg.Spec.Provider)
		}
		re, err := compilePattern(cfg.BusyPattern)
		if err != nil {
			return nil, fmt.Errorf("pty backend %q: busy pattern: %w", cfg.Spec.Provider, err)
		}
		b.busy = re
	}
	return b, nil
}

// watchSpec returns the readiness rule with the given switches.
func (b *Backend) watchSpec(needOutput, needBusy bool) watchSpec {
	return watchSpec{ready: b.pattern, busy: b.busy, quiet: b.quiet, needOutput: needOutput, needBusy: needBusy}
}

// compilePattern compiles a ready pattern in multi-line mode, so that ^ and
// $ match at the start and end of each screen line.
func compilePattern(expr string) (*regexp.Regexp, error) {
	return regexp.Compile("(?m)" + expr)
}

// Info returns what is known of the program.
func (b *Backend) Info() backends.Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.info
}

// Done is closed when the program has exited and the backend's goroutines
// have ended.
func (b *Backend) Done() <-chan struct{} { return b.done }

// Err says why the backend ended: nil while it runs and after a requested
// Stop, otherwise the failure or the exit status with the last lines of
// the screen.
func (b *Backend) Err() error {
	select {
	case <-b.done:
	default:
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fatal != nil {
		return b.fatal
	}
	if b.cmd == nil {
		return backends.ErrNotStarted
	}
	if b.exitErr != nil && !b.exitErr.Expected {
		return b.exitErr
	}
	return nil
}

// SetMode is not supported by terminal programs.
func (b *Backend) SetMode(context.Context, string) error { return backends.ErrUnsupported }

// SetConfigOption is not supported by terminal programs.
func (b *Backend) SetConfigOption(context.Context, string, string) error {
	return backends.ErrUnsupported
}

// emit sends ev to the running turn, or to Config.OnEvent outside turns.
func (b *Backend) emit(ev backends.Event) {
	b.emitMu.Lock()
	defer b.emitMu.Unlock()
	b.emitLocked(ev)
}

func (b *Backend) emitLocked(ev backends.Event) {
	ev.Time = b.now()
	if b.turnEmit != nil {
		b.turnEmit(ev)
		return
	}
	b.cfg.OnEvent(ev)
}

func (b *Backend) event(t backends.EventType, data any) backends.Event {
	return backends.NewEvent(t, b.cfg.Spec.Provider, data)
}

// killOwn kills the program's session for cause, a decision of the
// backend (the program ignored the cancel keys): the exit is expected,
// like a Stop, and does not count as a crash.
func (b *Backend) killOwn(cause error) {
	b.mu.Lock()
	if b.ownKill == nil && b.fatal == nil {
		b.ownKill = cause
		b.logger.Warn("killing terminal program", "reason", cause)
	}
	cmd := b.cmd
	b.mu.Unlock()
	if cmd != nil {
		killSession(cmd.Process.Pid)
	}
}

func (b *Backend) hasExited() bool {
	select {
	case <-b.procDone:
		return true
	default:
		return false
	}
}
