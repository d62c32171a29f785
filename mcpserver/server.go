// Package mcpserver is agentpool's Model Context Protocol server: it lets
// another agent (Claude Code, Codex, Gemini CLI, anything that speaks MCP)
// delegate work to the pool. It is a client of the running daemon's API
// with the user's credential: its tools list providers, open sessions,
// prompt them, wait for turns with progress notifications, read diffs,
// answer permission requests, merge, close, and run attempts.
//
// A daemon's refusal is a tool result marked as an error and carrying the
// daemon's message, never a protocol error, so that the calling model reads
// why and can act on it.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults of Config.
const (
	// DefaultMaxWait is the longest a tool waits in one call. MCP clients
	// time tool calls out (Codex after 60 s by default): a call returns
	// before, saying what still runs, and the caller calls again.
	DefaultMaxWait = 50 * time.Second
	// DefaultHeartbeat is how often a waiting tool sends a progress
	// notification when nothing else happens.
	DefaultHeartbeat = 5 * time.Second
	// DefaultMaxText bounds the text of a tool result (the agent's final
	// text, a patch) in bytes; longer text is cut, saying so.
	DefaultMaxText = 48 << 10
)

// API is what the server needs of the daemon's API; *httpapi.Client
// satisfies it. A refusal is an error whose text is the daemon's message
// (an *httpapi.Error); the server shows it to the caller as is.
type API interface {
	Providers(ctx context.Context) (registry.Snapshot, error)
	Sessions(ctx context.Context) ([]pool.Session, error)
	Session(ctx context.Context, id string) (pool.Session, error)
	CreateSession(ctx context.Context, req pool.CreateRequest) (pool.Session, error)
	// CreateSessionPrompt creates a session and starts its first turn in
	// the same request.
	CreateSessionPrompt(ctx context.Context, req pool.CreateRequest, prompt string) (httpapi.CreatedSession, error)
	CloseSession(ctx context.Context, id string, discard bool) (pool.CloseResult, error)
	// Prompt starts a turn and returns it at once (wait false).
	Prompt(ctx context.Context, session, agent, text string, wait bool) (pool.Turn, error)
	Turn(ctx context.Context, session string, turn int64, wait bool) (pool.Turn, error)
	Cancel(ctx context.Context, session string) error
	// Events calls fn for each event of session after seq `after`, stored
	// then live, until fn returns an error (httpapi.ErrStop ends it with
	// nil), the session closes (nil) or ctx ends (ctx's error).
	Events(ctx context.Context, session string, after int64, fn func(backends.Event) error) error
	Permissions(ctx context.Context, session string) ([]permission.Pending, error)
	Answer(ctx context.Context, session, request, choice string) error
	Diff(ctx context.Context, session string, turn int64) (pool.Diff, error)
	MergeSession(ctx context.Context, id string, req pool.MergeRequest) (pool.MergeResult, error)
	// Call sends any other request (the attempts endpoints) with a JSON
	// body and decodes the JSON answer into out.
	Call(ctx context.Context, method, path string, body, out any) error
}

// Config configures a Server.
type Config struct {
	// Connect returns the API client for one tool call. It is called for
	// every call, so that a daemon started (or restarted on another port)
	// after the server is found; an error is shown to the caller.
	Connect func(ctx context.Context) (API, error)
	// Version is reported to clients.
	Version string
	// WorkDir resolves a relative repository path, and is the repository
	// of create_session when none is given (the directory the MCP client
	// started the server in: its project). "" leaves both to the daemon.
	WorkDir string
	// MaxWait caps the time a tool waits in one call (default
	// DefaultMaxWait).
	MaxWait time.Duration
	// Heartbeat is the period of progress notifications while nothing
	// happens (default DefaultHeartbeat).
	Heartbeat time.Duration
	// MaxText bounds long texts in results (default DefaultMaxText).
	MaxText int
	// Logger gets the server's diagnostics; it must not write to stdout,
	// which is the protocol stream (nil: slog.Default()).
	Logger *slog.Logger
}

// Server is the MCP server. Make it with New.
type Server struct {
	cfg    Config
	logger *slog.Logger
	mcp    *mcp.Server

	mu sync.Mutex
	// starts remembers, for turns this server started, the last seq of
	// their session before the prompt, so that waiting for a turn reads
	// only its own events. Bounded by maxStarts.
	starts map[turnKey]int64
	// toolErrs are the errors of adding the tools, which New returns.
	toolErrs []error
}

// turnKey names a turn.
type turnKey struct {
	session string
	turn    int64
}

// maxStarts bounds Server.starts; past it, the map is emptied (a wait
// without a known start reads the session's log from its beginning).
const maxStarts = 4096

// New returns a server with all its tools.
func New(cfg Config) (*Server, error) {
	if cfg.Connect == nil {
		return nil, errors.New("mcpserver: Config.Connect is required")
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.MaxText <= 0 {
		cfg.MaxText = DefaultMaxText
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	s := &Server{cfg: cfg, logger: cfg.Logger, starts: map[turnKey]int64{}}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "agentpool", Title: "agentpool", Version: cfg.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: s.logger, Capabilities: &mcp.ServerCapabilities{}})
	s.addSessionTools()
	s.addForkTool() // fork.go
	s.addTurnTools()
	s.addPermissionTools()
	s.addAttemptTools()
	if err := errors.Join(s.toolErrs...); err != nil {
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	return s, nil
}

// instructions tell the calling model how the tools fit together.
const instructions = `agentpool runs coding agents (Claude Code, Codex, Gemini CLI, ...) in sessions, each in its own git worktree on its own branch of a repository, so that work can be delegated to them and merged back.
Usual flow: list_providers (which agents are ready) → create_session (repo + agent) → prompt (returns the turn number at once) → wait_turn (call again while it says "running"; answer permission requests it reports with answer_permission) → get_diff → merge_session or prompt again → close_session.
To try several agents (or several tries of one) on the same task and keep the best: start_attempts → get_attempts (wait) → pick_attempt.`

// Run serves one client on transport t until it disconnects or ctx ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	return s.mcp.Run(ctx, t)
}

// rememberStart records that turn of session started after seq.
func (s *Server) rememberStart(session string, turn, seq int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.starts) >= maxStarts {
		clear(s.starts)
	}
	s.starts[turnKey{session, turn}] = seq
}

// startOf returns the seq after which turn of session's events are (0
// when unknown).
func (s *Server) startOf(session string, turn int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts[turnKey{session, turn}]
}

// api connects for one call.
func (s *Server) api(ctx context.Context) (API, error) {
	a, err := s.cfg.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to the agentpool daemon: %w", err)
	}
	return a, nil
}
