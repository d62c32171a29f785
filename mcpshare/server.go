package mcpshare

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentpool/agentpool/backends"
)

// server is one shared definition: its process and client connection
// when it runs, and the MCP server every agent's session talks to.
type server struct {
	m   *Manager
	id  string
	def backends.MCPServer
	dir string
	log *slog.Logger

	face    *mcp.Server
	handler *mcp.StreamableHTTPHandler

	clients             atomic.Int64
	calls, errs, starts atomic.Int64

	mu       sync.Mutex
	names    []string
	up       *upstream
	starting chan struct{} // closed when the start under way ends
	lastUse  time.Time
	lastErr  string
	// lastStart is when the last start began (restartBackoff).
	lastStart time.Time
	inflight  map[*call]struct{}
	progress  map[string]*call // by the token sent to the server
	nextTok   int64
	closed    bool

	mirrorMu sync.Mutex        // one mirror at a time
	mirrored map[string]string // "tool:name" → its JSON, what the face has
}

// UpstreamProtocolVersion is the MCP version the Manager asks a shared
// server for: the one the servers in use speak, in which a server asks its
// client (sampling, elicitation, roots) with requests of its own during a
// call, which the Manager routes to the calling agent.
const UpstreamProtocolVersion = "2025-11-25"

// restartBackoff is the least time between two starts of a server.
const restartBackoff = 500 * time.Millisecond

// upstream is one run of the server's process, and the Manager's client
// session with it.
type upstream struct {
	proc *backends.Process
	cs   *mcp.ClientSession
	done chan struct{} // closed once it ended and was cleaned up
}

// call is one request of an agent's being proxied.
type call struct {
	ss      *mcp.ServerSession
	token   any    // the agent's progress token, nil when it gave none
	upToken string // the token sent to the server in its place
}

func newServer(m *Manager, id string, def backends.MCPServer) *server {
	s := &server{m: m, id: id, def: def, dir: filepath.Join(m.cfg.Dir, id),
		log:      m.log.With("mcp_server", id, "command", def.Command),
		inflight: map[*call]struct{}{}, progress: map[string]*call{}, mirrored: map[string]string{}}
	s.face = mcp.NewServer(&mcp.Implementation{Name: "agentpool-shared-" + def.Command, Version: "1"},
		&mcp.ServerOptions{Logger: discard, Capabilities: &mcp.ServerCapabilities{}, CompletionHandler: s.complete})
	s.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.face },
		&mcp.StreamableHTTPOptions{Logger: discard})
	return s
}

var discard = slog.New(slog.DiscardHandler)

func (s *server) noteName(name string) {
	s.mu.Lock()
	if !slices.Contains(s.names, name) {
		s.names = append(s.names, name)
		slices.Sort(s.names)
	}
	s.mu.Unlock()
}

func (s *server) touch() {
	s.mu.Lock()
	s.lastUse = time.Now()
	s.mu.Unlock()
}

// ensure returns the running server, starting it when it does not run.
// A start is not bound to ctx (other agents may wait for it), only the
// wait is.
func (s *server) ensure(ctx context.Context) (*upstream, error) {
	for {
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			return nil, ErrClosed
		case s.up != nil:
			up := s.up
			s.mu.Unlock()
			return up, nil
		case s.starting != nil:
			ch := s.starting
			s.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		s.starting = ch
		wait := time.Until(s.lastStart.Add(restartBackoff))
		s.mu.Unlock()
		if wait > 0 {
			// A server that ends at once is not started again at once.
			select {
			case <-time.After(wait):
			case <-s.m.ctx.Done():
			}
		}
		s.mu.Lock()
		s.lastStart = time.Now()
		s.mu.Unlock()
		up, err := s.start()
		s.mu.Lock()
		s.starting = nil
		if err != nil {
			s.lastErr = err.Error()
		} else if s.closed {
			err = ErrClosed
		} else {
			s.up, s.lastUse = up, time.Now()
		}
		close(ch)
		s.mu.Unlock()
		if err != nil {
			if up != nil {
				s.stopUpstream(up)
			}
			return nil, err
		}
		return up, nil
	}
}

// start runs the server's process in its state directory and jail, and
// connects to it.
func (s *server) start() (*upstream, error) {
	ctx, cancel := context.WithTimeout(s.m.ctx, s.m.cfg.StartTimeout)
	defer cancel()
	if err := os.MkdirAll(filepath.Join(s.dir, "tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	env := stateEnv(s.m.cfg.Env, s.dir, s.def.Env)
	path, err := lookPath(s.def.Command, lookEnv(env, "PATH"))
	if err != nil {
		return nil, err
	}
	var jail backends.Jail
	if s.m.cfg.Jail != nil {
		if jail, err = s.m.cfg.Jail(s.id, s.def, s.dir); err != nil {
			return nil, fmt.Errorf("confine: %w", err)
		}
	}
	proc, err := backends.StartProcess(backends.ProcessConfig{Path: path, Args: s.def.Args, Env: env, Dir: s.dir,
		Logger: s.log, Jail: jail, StopGrace: 2 * time.Second, KillGrace: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", s.def.Command, err)
	}
	n := s.starts.Add(1)
	s.log.Info("shared MCP server started", "pid", proc.PID(), "start", n)
	client := mcp.NewClient(&mcp.Implementation{Name: "agentpool", Version: "1"}, &mcp.ClientOptions{
		Logger:                      discard,
		CreateMessageHandler:        s.sample,
		ElicitationHandler:          s.elicit,
		ProgressNotificationHandler: s.progressFrom,
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { s.remirror() },
		PromptListChangedHandler:    func(context.Context, *mcp.PromptListChangedRequest) { s.remirror() },
		ResourceListChangedHandler:  func(context.Context, *mcp.ResourceListChangedRequest) { s.remirror() },
	})
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: proc.Stdout(), Writer: proc.Stdin()},
		&mcp.ClientSessionOptions{ProtocolVersion: UpstreamProtocolVersion})
	if err != nil {
		stopCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = proc.Stop(stopCtx)
		stop()
		if tail := strings.TrimSpace(proc.Tail()); tail != "" {
			err = fmt.Errorf("%w (stderr: %s)", err, tail)
		}
		return nil, fmt.Errorf("initialize %s: %w", s.def.Command, err)
	}
	up := &upstream{proc: proc, cs: cs, done: make(chan struct{})}
	s.m.wg.Add(1)
	go s.watch(up)
	if err := s.mirror(ctx, up); err != nil {
		return up, fmt.Errorf("list %s: %w", s.def.Command, err)
	}
	return up, nil
}

// watch waits for the end of up: its process exits (a crash, or a stop),
// or its connection ends, which stops the process.
func (s *server) watch(up *upstream) {
	defer s.m.wg.Done()
	connEnded := make(chan struct{})
	go func() { _ = up.cs.Wait(); close(connEnded) }()
	select {
	case <-up.proc.Done():
	case <-connEnded:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = up.proc.Stop(ctx)
		cancel()
		<-up.proc.Done()
	}
	_ = up.cs.Close()
	<-connEnded
	s.mu.Lock()
	if s.up == up {
		s.up = nil
		why := "exited"
		if e := up.proc.ExitError(); e != nil {
			why = e.Error()
		}
		s.lastErr = why
		s.log.Warn("shared MCP server ended; the next call starts it again", "why", why)
	}
	s.mu.Unlock()
	close(up.done)
}

// stopUpstream stops up and waits until watch has cleaned it up.
func (s *server) stopUpstream(up *upstream) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = up.proc.Stop(ctx)
	cancel()
	<-up.done
}

// stopIfIdle stops the server when it runs, no call is in flight, and
// none was made for idle.
func (s *server) stopIfIdle(idle time.Duration) {
	s.mu.Lock()
	up := s.up
	if up == nil || len(s.inflight) > 0 || time.Since(s.lastUse) < idle {
		s.mu.Unlock()
		return
	}
	s.up = nil
	s.mu.Unlock()
	s.log.Info("stopping idle shared MCP server", "idle", idle)
	s.stopUpstream(up)
}

// close stops the server for good and ends its agents' sessions.
func (s *server) close() {
	s.mu.Lock()
	s.closed = true
	up := s.up
	s.up = nil
	ch := s.starting
	s.mu.Unlock()
	if ch != nil {
		<-ch
	}
	if up != nil {
		s.stopUpstream(up)
	}
	for ss := range s.face.Sessions() {
		_ = ss.Close()
	}
}

// closeSessions ends the MCP sessions made with g.
func (s *server) closeSessions(g *grant) {
	s.m.mu.Lock()
	ids := make(map[string]bool, len(g.mcpSessions))
	for id := range g.mcpSessions {
		ids[id] = true
	}
	s.m.mu.Unlock()
	for ss := range s.face.Sessions() {
		if ids[ss.ID()] {
			_ = ss.Close()
		}
	}
}

func (s *server) stat() Stat {
	s.mu.Lock()
	st := Stat{ID: s.id, Names: slices.Clone(s.names), Command: append([]string{s.def.Command}, s.def.Args...),
		LastUse: s.lastUse, LastError: s.lastErr}
	up := s.up
	s.mu.Unlock()
	st.Clients = int(s.clients.Load())
	st.Calls, st.Errors, st.Starts = s.calls.Load(), s.errs.Load(), s.starts.Load()
	if up != nil {
		st.Running, st.PID = true, up.proc.PID()
		st.RSS = TreeRSS(up.proc.PID())
	}
	return st
}

// lookPath finds a program named without a slash in path.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			return "", fmt.Errorf("command %q: a shared server's program is named by an absolute path or looked up in PATH", name)
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q: %w", name, exec.ErrNotFound)
}
