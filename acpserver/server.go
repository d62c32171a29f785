// Package acpserver is agentpool's face to editors: an ACP agent (the
// agent side of the Agent Client Protocol, over acp-go-sdk) that serves
// the pool's sessions to Zed, JetBrains, Neovim and any ACP client. It is
// a client of the running daemon's API, as mcpserver is: sessions, turns,
// permissions and events stay the pool's, and the editor is one more
// viewer of them.
//
// An ACP session is a pool session: its id is the pool session's id, its
// work happens in the session's worktree, and the session outlives the
// editor. The session's agent is the config option "agent"; the
// underlying agent's own config options, modes and slash commands are
// passed through with their own ids.
package acpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	acp "github.com/coder/acp-go-sdk"
)

// API is what the server needs of the daemon's API; *httpapi.Client
// satisfies it. A refusal is an *httpapi.Error carrying the daemon's
// message, which the editor is shown.
type API interface {
	Health(ctx context.Context) (httpapi.Health, error)
	Providers(ctx context.Context) (registry.Snapshot, error)
	Sessions(ctx context.Context) ([]pool.Session, error)
	Session(ctx context.Context, id string) (pool.Session, error)
	CreateSession(ctx context.Context, req pool.CreateRequest) (pool.Session, error)
	CloseSession(ctx context.Context, id string, discard bool) (pool.CloseResult, error)
	// Prompt starts a turn and returns it at once (wait false).
	Prompt(ctx context.Context, session, agent, text string, wait bool) (pool.Turn, error)
	Cancel(ctx context.Context, session string) error
	// Events calls fn for each event of session after seq `after`, stored
	// then live, until fn returns an error (httpapi.ErrStop ends it with
	// nil), the session closes (nil) or ctx ends.
	Events(ctx context.Context, session string, after int64, fn func(backends.Event) error) error
	EventLog(ctx context.Context, session string, after int64) ([]backends.Event, error)
	// Turns lists the session's turns, oldest first.
	Turns(ctx context.Context, session string) ([]pool.Turn, error)
	Permissions(ctx context.Context, session string) ([]permission.Pending, error)
	Answer(ctx context.Context, session, request, choice string) error
	AgentConfig(ctx context.Context, session, agent string) (pool.AgentConfig, error)
	SetAgentConfig(ctx context.Context, session, agent string, ch pool.ConfigChange) (pool.ConfigResult, error)
}

var _ API = (*httpapi.Client)(nil)

// Command is one of the pool's own slash commands, answered by agentpool
// in the thread rather than by the agent.
type Command struct {
	// Name is the command without its "/".
	Name        string
	Description string
	// Hint describes the input after the name; "" when it takes none.
	Hint string
	// Run does what the command does for session with the text after the
	// name, and returns what to show in the thread. An error is shown too.
	Run func(ctx context.Context, session, args string) (string, error)
}

// Config configures a Server.
type Config struct {
	// Connect returns the API client. It is called at initialize and for
	// each request, so that a daemon started (or restarted on another
	// port) after the editor started this server is found; its error is
	// what the editor is shown, so it must say how to start the daemon.
	Connect func(ctx context.Context) (API, error)
	// DefaultAgent is the agent of new sessions; "" lets the daemon
	// choose (the providers file's "default_agent", else demo).
	DefaultAgent string
	// Version is reported in agentInfo.
	Version string
	// Commands are the pool's own slash commands.
	Commands []Command
	// GitTopLevel returns the top directory of the git repository holding
	// dir, or an error a person can act on (default: git rev-parse).
	GitTopLevel func(ctx context.Context, dir string) (string, error)
	// StartHint says how to start the daemon; Initialize adds it to the
	// error when the daemon does not answer.
	StartHint string
	// Logger gets diagnostics; it must not write to stdout, the protocol
	// stream (nil: slog.Default()).
	Logger *slog.Logger
}

// Server is the ACP agent. Make it with New and run it with Serve; one
// Server serves one connection.
type Server struct {
	cfg    Config
	logger *slog.Logger

	ready chan struct{} // closed once conn is set
	conn  *acp.AgentSideConnection

	// ctx ends when Serve returns; the followers and permission requests
	// run under it and wg waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	sessions map[string]*session

	tops sync.Map // cwd → the top of its repository, see repoOf
}

var _ acp.Agent = (*Server)(nil)

// New returns a server.
func New(cfg Config) (*Server, error) {
	if cfg.Connect == nil {
		return nil, errors.New("acpserver: Config.Connect is required")
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.GitTopLevel == nil {
		cfg.GitTopLevel = gitTopLevel
	}
	s := &Server{cfg: cfg, logger: cfg.Logger, ready: make(chan struct{}), sessions: map[string]*session{}}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return s, nil
}

// Serve speaks ACP on r (from the editor) and w (to it) until the editor
// closes its end or ctx ends. Sessions are left running in the daemon.
func (s *Server) Serve(ctx context.Context, r io.Reader, w io.Writer) error {
	s.ctx, s.cancel = context.WithCancel(ctx)
	defer s.cancel()
	// The SDK starts reading as soon as the connection is made, and its
	// reader uses the logger unguarded: the reader waits for the logger.
	gate := &gatedReader{r: r, open: make(chan struct{})}
	s.conn = acp.NewAgentSideConnection(s, w, gate)
	s.conn.SetLogger(s.logger)
	close(gate.open)
	close(s.ready)
	select {
	case <-s.conn.Done():
	case <-ctx.Done():
	}
	s.cancel()
	s.wg.Wait()
	return nil
}

// gatedReader holds every Read until open is closed.
type gatedReader struct {
	r    io.Reader
	open chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}

// api connects for one request.
func (s *Server) api(ctx context.Context) (API, error) {
	a, err := s.cfg.Connect(ctx)
	if err != nil {
		return nil, &acp.RequestError{Code: codeInternal, Message: err.Error()}
	}
	return a, nil
}

// go runs f on a goroutine the server owns.
func (s *Server) goOwned(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// update sends one session/update; an error (the editor went away) is
// logged.
func (s *Server) update(id string, u acp.SessionUpdate) {
	<-s.ready
	if err := s.conn.SessionUpdate(s.ctx, acp.SessionNotification{SessionId: acp.SessionId(id), Update: u}); err != nil {
		s.logger.Debug("send session/update", "session", id, "err", err)
	}
}

// Initialize answers the handshake once the daemon is reachable: without
// one, the error says how to start it.
func (s *Server) Initialize(ctx context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	api, err := s.api(ctx)
	if err != nil {
		return acp.InitializeResponse{}, err
	}
	if _, err := api.Health(ctx); err != nil {
		msg := "the agentpool daemon does not answer: " + err.Error()
		if s.cfg.StartHint != "" {
			msg += "; " + s.cfg.StartHint
		}
		return acp.InitializeResponse{}, &acp.RequestError{Code: codeInternal, Message: msg}
	}
	title := "agentpool"
	return acp.InitializeResponse{
		ProtocolVersion: acp.ProtocolVersionNumber,
		AgentInfo:       &acp.Implementation{Name: "agentpool", Title: &title, Version: s.cfg.Version},
		AuthMethods:     []acp.AuthMethod{},
		AgentCapabilities: acp.AgentCapabilities{
			LoadSession: true,
			// Prompts reach the pool as text: resource links and embedded
			// text resources are written into it; images and audio are not
			// taken.
			PromptCapabilities: acp.PromptCapabilities{EmbeddedContext: true},
			McpCapabilities:    acp.McpCapabilities{Http: true, Sse: true},
			SessionCapabilities: acp.SessionCapabilities{
				List:   &acp.SessionListCapabilities{},
				Resume: &acp.SessionResumeCapabilities{},
				Close:  &acp.SessionCloseCapabilities{},
			},
		},
	}, nil
}

// Authenticate is not needed: the daemon's credential is the user's.
func (s *Server) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

// Logout does nothing: there is no login.
func (s *Server) Logout(context.Context, acp.LogoutRequest) (acp.LogoutResponse, error) {
	return acp.LogoutResponse{}, nil
}
