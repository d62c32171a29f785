package mcpshare

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/agentpool/agentpool/backends"
)

// Defaults of Config.
const (
	// DefaultIdleTimeout is how long a server runs without a call.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultStartTimeout bounds a server's start and its answer to
	// initialize (npx may download the package first).
	DefaultStartTimeout = 2 * time.Minute
)

// Errors of the Manager.
var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("mcpshare: closed")
)

// Config configures a Manager.
type Config struct {
	// Dir holds the servers' state directories, one per server id; it
	// must be absolute.
	Dir string
	// Addr is the loopback address the agents reach the Manager at;
	// "" means 127.0.0.1 on a port of the kernel's choosing.
	Addr string
	// IdleTimeout stops a server nobody called for that long
	// (0: DefaultIdleTimeout; negative: never).
	IdleTimeout time.Duration
	// StartTimeout bounds a server's start (0: DefaultStartTimeout).
	StartTimeout time.Duration
	// Jail, if set, makes the jail a server starts in: its state
	// directory is stateDir, which it may write. nil runs servers in
	// their own process group only.
	Jail func(id string, def backends.MCPServer, stateDir string) (backends.Jail, error)
	// Env is the environment a server starts from, before its own env;
	// nil means PATH, LANG and the locale variables of the daemon's. HOME,
	// TMPDIR and the XDG directories are always the state directory's.
	Env []string
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
}

// Manager runs the shared servers and serves them to agents. Its methods
// are safe for concurrent use.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	ln     net.Listener
	http   *http.Server
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	servers map[string]*server
	grants  map[string]*grant // by token
	closed  bool
}

// grant is what one credential reaches.
type grant struct {
	user    string          // session/agent/nonce: the SDK's user id
	session string          // the pool session
	servers map[string]bool // server ids
	// mcpSessions are the MCP session ids made with the credential.
	mcpSessions map[string]bool
}

// New listens on cfg.Addr and returns a Manager serving there; no server
// runs until an agent uses it.
func New(cfg Config) (*Manager, error) {
	if cfg.Dir == "" {
		return nil, errors.New("mcpshare: no state directory")
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Env == nil {
		cfg.Env = baseEnv(os.Environ())
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("mcpshare: %w", err)
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("mcpshare: address %q: %w", cfg.Addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("mcpshare: address %q: want a loopback address", cfg.Addr)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("mcpshare: %w", err)
	}
	m := &Manager{cfg: cfg, log: cfg.Logger.With("component", "mcpshare"), ln: ln,
		servers: map[string]*server{}, grants: map[string]*grant{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.Handle("/mcp/{id}", auth.RequireBearerToken(m.verify, &auth.RequireBearerTokenOptions{})(http.HandlerFunc(m.serve)))
	m.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	m.wg.Add(2)
	go func() {
		defer m.wg.Done()
		if err := m.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Error("mcp share listener ended", "err", err)
		}
	}()
	go m.reap()
	return m, nil
}

// Addr returns the "127.0.0.1:port" agents reach the Manager at.
func (m *Manager) Addr() string { return m.ln.Addr().String() }

// Lease is one agent's access to the shared servers it was given: a
// bearer credential that names its session, and each server's URL.
type Lease struct {
	m     *Manager
	token string
	urls  map[string]string
	once  sync.Once
}

// Token returns the lease's bearer credential.
func (l *Lease) Token() string { return l.token }

// URL returns the URL of the server the agent knows by name, "" when the
// lease has none of that name.
func (l *Lease) URL(name string) string { return l.urls[name] }

// Release revokes the credential and closes the MCP sessions made with
// it; the servers keep running for the others. It is idempotent.
func (l *Lease) Release() {
	l.once.Do(func() { l.m.release(l.token) })
}

// Attach gives an agent of session the servers of defs (by the names the
// agent knows them by), each started on first use, and returns its lease.
func (m *Manager) Attach(session, agent string, defs backends.MCPServers) (*Lease, error) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	g := &grant{user: session + "/" + agent + "/" + token[:8], session: session,
		servers: map[string]bool{}, mcpSessions: map[string]bool{}}
	l := &Lease{m: m, token: token, urls: map[string]string{}}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	for _, name := range defs.Names() {
		def := defs[name]
		if def.Transport() != backends.MCPStdio {
			return nil, fmt.Errorf("mcpshare: server %q: only stdio servers are shared", name)
		}
		id := ID(def)
		s := m.servers[id]
		if s == nil {
			s = newServer(m, id, def)
			m.servers[id] = s
		}
		if !g.servers[id] {
			g.servers[id] = true
			s.clients.Add(1)
		}
		s.noteName(name)
		l.urls[name] = "http://" + m.Addr() + "/mcp/" + id
	}
	m.grants[token] = g
	return l, nil
}

func (m *Manager) release(token string) {
	m.mu.Lock()
	g := m.grants[token]
	delete(m.grants, token)
	var servers []*server
	if g != nil {
		for id := range g.servers {
			if s := m.servers[id]; s != nil {
				servers = append(servers, s)
			}
		}
	}
	m.mu.Unlock()
	if g == nil {
		return
	}
	for _, s := range servers {
		s.clients.Add(-1)
		s.closeSessions(g)
	}
}

// grantKey is where the TokenInfo of a request keeps its grant.
const grantKey = "agentpool.grant"

// verify is the bearer check of every request.
func (m *Manager) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	m.mu.Lock()
	g := m.grants[token]
	m.mu.Unlock()
	if g == nil {
		return nil, fmt.Errorf("%w: unknown or revoked agentpool MCP credential", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: g.user, Expiration: time.Now().Add(time.Hour), Extra: map[string]any{grantKey: g}}, nil
}

// serve routes a request to its server once its credential is known to
// reach it; a request that opens an MCP session starts the server first.
func (m *Manager) serve(w http.ResponseWriter, r *http.Request) {
	ti := auth.TokenInfoFromContext(r.Context())
	g, _ := ti.Extra[grantKey].(*grant)
	id := r.PathValue("id")
	m.mu.Lock()
	s := m.servers[id]
	m.mu.Unlock()
	if g == nil || s == nil || !g.servers[id] {
		http.Error(w, "agentpool: this credential does not reach this MCP server", http.StatusForbidden)
		return
	}
	if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
		if _, err := s.ensure(r.Context()); err != nil {
			http.Error(w, "agentpool: the shared MCP server did not start: "+err.Error(), http.StatusBadGateway)
			return
		}
		s.touch()
	}
	s.handler.ServeHTTP(w, r)
	if sid := w.Header().Get("Mcp-Session-Id"); sid != "" {
		m.mu.Lock()
		fresh := m.grants[tokenOf(r)] == g
		if fresh {
			g.mcpSessions[sid] = true
		}
		m.mu.Unlock()
		if !fresh {
			s.closeSessions(g) // released while the request ran
		}
	}
}

func tokenOf(r *http.Request) string {
	_, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return tok
}

// reap stops the servers nobody called for IdleTimeout.
func (m *Manager) reap() {
	defer m.wg.Done()
	if m.cfg.IdleTimeout < 0 {
		<-m.ctx.Done()
		return
	}
	every := min(max(m.cfg.IdleTimeout/4, 10*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		servers := make([]*server, 0, len(m.servers))
		for _, s := range m.servers {
			servers = append(servers, s)
		}
		m.mu.Unlock()
		for _, s := range servers {
			s.stopIfIdle(m.cfg.IdleTimeout)
		}
	}
}

// Close stops every server and the listener; calls in flight fail.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	servers := make([]*server, 0, len(m.servers))
	for _, s := range m.servers {
		servers = append(servers, s)
	}
	m.mu.Unlock()
	m.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = m.http.Shutdown(ctx)
	cancel()
	_ = m.http.Close()
	for _, s := range servers {
		s.close()
	}
	m.wg.Wait()
	return nil
}

// Stat is what the Manager shows of one shared server.
type Stat struct {
	// ID names the definition (see ID).
	ID string `json:"id"`
	// Names are the names agents know the server by.
	Names []string `json:"names"`
	// Command is its program and arguments (never its environment).
	Command []string `json:"command"`
	// Running says whether its process runs now; PID is its process.
	Running bool `json:"running"`
	PID     int  `json:"pid,omitempty"`
	// Clients are the agents given it now.
	Clients int `json:"clients"`
	// Calls and Errors count the calls proxied to it and those that failed.
	Calls  int64 `json:"calls"`
	Errors int64 `json:"errors"`
	// Starts counts its starts (1 + restarts).
	Starts int64 `json:"starts"`
	// RSS is the resident memory of its processes, in bytes.
	RSS int64 `json:"rss_bytes"`
	// LastUse is when it was last called.
	LastUse time.Time `json:"last_use,omitzero"`
	// LastError says why it last failed to start or ended, if it did.
	LastError string `json:"last_error,omitempty"`
}

// Stats returns each server the Manager knows, by id.
func (m *Manager) Stats() []Stat {
	m.mu.Lock()
	servers := make([]*server, 0, len(m.servers))
	for _, s := range m.servers {
		servers = append(servers, s)
	}
	m.mu.Unlock()
	out := make([]Stat, 0, len(servers))
	for _, s := range servers {
		out = append(out, s.stat())
	}
	slices.SortFunc(out, func(a, b Stat) int { return strings.Compare(a.ID, b.ID) })
	return out
}
