// Package acp is the backend for agents that speak the Agent Client Protocol
// over stdio. It spawns the agent in its own process group, performs the
// handshake, runs prompt turns and serves the agent's requests: file reads
// and writes through a FileSystem, terminals through Terminals and permission
// requests through a PermissionFunc. With none of them configured it
// advertises no fs or terminal capability and rejects every permission
// request; it never approves anything on its own.
//
// Between the agent's stdout and the SDK sits a line filter that enforces the
// 10 MiB line limit, ends the backend on a line that is not JSON-RPC, keeps
// session/update notifications in arrival order in a queue of its own (so
// the SDK's notification queue can never overflow and no update is dropped),
// answers empty-content fs/write_text_file requests that the SDK would reject,
// serves fs/read_text_file itself (encoding the answer once, where the SDK
// would encode it twice), takes the answer to session/prompt, and records
// the wire traffic when asked. Turns write session/prompt and
// session/cancel themselves, so the SDK connection is needed only for the
// handshake, mode and config calls and the agent's other requests: it is
// made when one of those needs it and closed when nothing does (link.go),
// and a warm agent between turns holds none.
package acp

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
)

// Defaults of Config.
const (
	DefaultCancelGrace  = 5 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	// MaxLine is the longest line accepted from an agent, as in the SDK.
	MaxLine = 10 << 20
	// maxQueuedEvents bounds the updates waiting for delivery. When they
	// are this many, the filter stops reading the agent's output until the
	// delivery goroutine takes them: an agent that outruns delivery is
	// slowed down (its stdout pipe fills) instead of filling memory, and
	// an update never waits behind more than this many.
	maxQueuedEvents = 256
	// maxQueuedBytes bounds the bytes (the Data) of the updates queued or
	// being delivered in the same way: the filter waits while they reach
	// it, so that 256 big updates are not held at once (one update over
	// the budget still goes through alone).
	maxQueuedBytes = 4 << 20
	clientName     = "agentpool"
)

// ClientVersion is reported to agents in initialize.
var ClientVersion = "dev"

// FileSystem serves fs/read_text_file and fs/write_text_file. Paths are the
// agent's absolute paths; the implementation confines them to the worktree.
// A missing file is an error wrapping acpfs.ErrNotFound.
type FileSystem interface {
	ReadTextFile(ctx context.Context, path string, line, limit *int) (string, error)
	WriteTextFile(ctx context.Context, path, content string) error
}

// Terminals serves the terminal/* methods. The backend closes it when the
// agent process ends, so no terminal outlives its agent.
type Terminals interface {
	Create(ctx context.Context, req acpfs.TerminalRequest) (string, error)
	Output(id string) (acpfs.TerminalOutput, error)
	WaitForExit(ctx context.Context, id string) (acpfs.ExitStatus, error)
	Kill(id string) error
	Release(id string) error
	Close() error
}

// PermissionRequest, PermissionOption, PermissionOutcome and PermissionFunc
// are the shared contract types of package backends.
type (
	PermissionRequest = backends.PermissionRequest
	PermissionOption  = backends.PermissionOption
	PermissionOutcome = backends.PermissionOutcome
	PermissionFunc    = backends.PermissionFunc
)

// Config configures one ACP backend.
type Config struct {
	// Spec is the launch spec; Spec.Dir must be the absolute worktree path.
	Spec backends.Spec
	// FS serves fs/*; nil advertises no fs capability.
	FS FileSystem
	// Terminals serves terminal/*; nil advertises no terminal capability.
	Terminals Terminals
	// Permissions decides permission requests; nil rejects them all.
	Permissions PermissionFunc
	// OnEvent receives events that happen outside a turn (updates before
	// the session is ready or after a turn ended, the history a
	// session/load replays, a lost context, the exit).
	OnEvent func(backends.Event)
	// Wire, if set, receives every line on the wire (inbound = from the
	// agent), with the values of the MCP servers' env and headers
	// replaced by backends.Redacted.
	Wire func(inbound bool, line []byte)
	// CancelGrace is how long a cancelled turn may take to end before the
	// agent is stopped.
	CancelGrace time.Duration
	// WriteTimeout bounds each write to the agent's stdin; an agent that
	// stops reading is stopped.
	WriteTimeout time.Duration
	// StopGrace and KillGrace tune the stop ladder (see backends.ProcessConfig).
	StopGrace, KillGrace time.Duration
	// Jail, if set, confines the agent and everything it starts; the
	// backend releases it when the agent has ended.
	Jail backends.Jail
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// MCPPlan, if set, replaces Spec.MCPServers in session/new,
	// session/load and session/resume: its HTTP set for an agent that
	// takes http MCP servers, its Stdio set otherwise (the daemon's shared
	// servers, reached over http or through the stdio relay).
	MCPPlan *backends.MCPPlan
	// NoSession makes Start stop after initialize, with no session made
	// or taken up: for asking the agent about its sessions (ListSessions).
	NoSession bool
}

// Errors returned by the backend.
var (
	// ErrProtocol means the agent broke the protocol (bad line, bad version).
	ErrProtocol = errors.New("agent broke the protocol")
	// ErrTurnTimeout means the turn deadline passed.
	ErrTurnTimeout = errors.New("turn deadline passed")
	// ErrIgnoredCancel means the agent did not end a cancelled turn in time.
	ErrIgnoredCancel = errors.New("agent ignored session/cancel")
)

// Backend is one ACP agent process. Create it with New, then Start it.
type Backend struct {
	cfg    Config
	logger *slog.Logger

	proc *backends.Process
	// links holds the SDK connection while something needs it (link.go).
	links links
	out   *guardedWriter
	// outputDone is closed when the filter has read the agent's output to
	// its end.
	outputDone chan struct{}
	ctx        context.Context // lives as long as the backend
	cancel     context.CancelCauseFunc
	wg         sync.WaitGroup
	done       chan struct{}

	queue eventQueue

	mu        sync.Mutex
	info      backends.Info
	sessionID string
	started   bool
	// replaying is set from the session/load request until the first
	// prompt is written; replayLast is when the last update of that
	// window (or the load's answer) arrived (replay.go).
	replaying  bool
	replayLast time.Time
	fatal      error
	// toolCalls holds what the agent announced of its tool calls, for
	// permission requests that leave the kind out (toolcalls.go).
	toolCalls toolCalls
	turn      *turnState
	// promptID is the wire id of the session/prompt in flight; promptMark
	// is the queue position when its answer arrived. Prompt ids count
	// from promptIDBase, far from the SDK's (which count from 1 on each
	// connection), and are never reused.
	promptID     string
	prompts      int64
	promptMark   uint64
	promptMarked bool
	permCtx      context.Context
	permStop     context.CancelFunc
	stopOnce     sync.Once
	// forkFrom is the agent session StartFork forks (under mu).
	forkFrom string
}

var _ backends.Backend = (*Backend)(nil)

// New returns an unstarted backend for cfg.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Spec.Validate(); err != nil {
		return nil, err
	}
	if cfg.Spec.Kind != backends.KindACP {
		return nil, errors.New("acp backend: spec kind is " + string(cfg.Spec.Kind))
	}
	if cfg.Spec.Dir == "" {
		return nil, errors.New("acp backend: spec dir (the worktree) is empty")
	}
	if cfg.CancelGrace <= 0 {
		cfg.CancelGrace = DefaultCancelGrace
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.OnEvent == nil {
		cfg.OnEvent = func(backends.Event) {}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	// The wire carries the MCP servers' secrets in session/new and
	// session/load (and an agent may echo them): never print them.
	cfg.Wire = redactWire(cfg.Wire, withPlan(cfg.Spec.MCPServers, cfg.MCPPlan))
	b := &Backend{
		cfg:        cfg,
		logger:     logger.With("agent", cfg.Spec.Provider),
		done:       make(chan struct{}),
		outputDone: make(chan struct{}),
	}
	b.ctx, b.cancel = context.WithCancelCause(context.Background())
	b.permCtx, b.permStop = context.WithCancel(b.ctx)
	b.queue.init()
	return b, nil
}

// Info returns what is known of the agent.
func (b *Backend) Info() backends.Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.info
}

// Done is closed when the agent process has exited and the backend's
// goroutines have ended.
func (b *Backend) Done() <-chan struct{} { return b.done }

// Err says why the backend ended: nil after a requested Stop, otherwise the
// protocol failure or the exit status with the stderr tail.
func (b *Backend) Err() error {
	select {
	case <-b.done:
	default:
		return nil
	}
	b.mu.Lock()
	fatal := b.fatal
	b.mu.Unlock()
	if fatal != nil {
		return fatal
	}
	if b.proc == nil {
		return backends.ErrNotStarted
	}
	if e := b.proc.ExitError(); e != nil && !e.Expected {
		return e
	}
	return nil
}

// fail records the first fatal error and kills the agent's process group.
func (b *Backend) fail(err error) {
	b.mu.Lock()
	if b.fatal == nil {
		b.fatal = err
		b.logger.Warn("stopping agent", "err", err)
	}
	proc := b.proc
	b.mu.Unlock()
	if proc != nil {
		_ = backends.KillGroup(proc.PID())
	}
}
