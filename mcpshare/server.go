package mcpshare

import (
	"context"
	"encoding/json"
	"errors"
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

// begin records a call of ss's, whose progress token is token.
func (s *server) begin(ss *mcp.ServerSession, token any) *call {
	c := &call{ss: ss, token: token}
	s.mu.Lock()
	s.inflight[c] = struct{}{}
	s.lastUse = time.Now()
	if token != nil {
		s.nextTok++
		c.upToken = fmt.Sprintf("agentpool-%d", s.nextTok)
		s.progress[c.upToken] = c
	}
	s.mu.Unlock()
	return c
}

func (s *server) end(c *call, err error) {
	s.calls.Add(1)
	if err != nil {
		s.errs.Add(1)
	}
	s.mu.Lock()
	delete(s.inflight, c)
	if c.upToken != "" {
		delete(s.progress, c.upToken)
	}
	s.lastUse = time.Now()
	s.mu.Unlock()
}

// soleCaller returns the agent session whose calls are the only ones in
// flight, nil when there are none or several agents' calls.
func (s *server) soleCaller() *mcp.ServerSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ss *mcp.ServerSession
	for c := range s.inflight {
		if ss != nil && c.ss != ss {
			return nil
		}
		ss = c.ss
	}
	return ss
}

// ErrNoCaller refuses a server's request to its client (sampling,
// elicitation) that no single agent's call can answer.
var ErrNoCaller = errors.New("agentpool: a shared MCP server may ask its client only during one agent's call, and no single agent's call is in flight")

func (s *server) sample(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	ss := s.soleCaller()
	if ss == nil {
		return nil, ErrNoCaller
	}
	return ss.CreateMessage(ctx, req.Params)
}

func (s *server) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	ss := s.soleCaller()
	if ss == nil {
		return nil, ErrNoCaller
	}
	return ss.Elicit(ctx, req.Params)
}

// progressFrom routes a progress notification of the server's to the
// agent whose call it is about, with the agent's own token.
func (s *server) progressFrom(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	tok, _ := req.Params.ProgressToken.(string)
	s.mu.Lock()
	c := s.progress[tok]
	s.mu.Unlock()
	if c == nil {
		return
	}
	p := *req.Params
	p.ProgressToken = c.token
	_ = c.ss.NotifyProgress(ctx, &p)
}

// proxy runs one call of an agent's on the running server.
func proxy[P interface{ SetProgressToken(any) }, R any](s *server, ctx context.Context, ss *mcp.ServerSession, token any, params P,
	do func(*mcp.ClientSession, P) (R, error)) (R, error) {
	var zero R
	up, err := s.ensure(ctx)
	if err != nil {
		s.calls.Add(1)
		s.errs.Add(1)
		return zero, fmt.Errorf("agentpool: the shared MCP server is not running: %w", err)
	}
	c := s.begin(ss, token)
	if c.upToken != "" {
		params.SetProgressToken(c.upToken)
	}
	res, err := do(up.cs, params)
	if err != nil && errors.Is(err, mcp.ErrConnectionClosed) && ctx.Err() == nil {
		// The call was never sent: the server had ended (a crash not yet
		// seen) when it was made. Once that run is cleaned up, the call
		// goes to the next one; a call that was in flight when the
		// server ended fails, as it may have run.
		select {
		case <-up.done:
		case <-ctx.Done():
		}
		if up, err = s.ensure(ctx); err == nil {
			res, err = do(up.cs, params)
		}
	}
	s.end(c, err)
	return res, err
}

func (s *server) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: req.Params.Name}
	if len(req.Params.Arguments) > 0 {
		p.Arguments = req.Params.Arguments
	}
	res, err := proxy(s, ctx, req.Session, req.Params.GetProgressToken(), p, func(cs *mcp.ClientSession, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, p)
	})
	if err == nil && res != nil && res.IsError {
		s.errs.Add(1)
	}
	return res, err
}

func (s *server) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	return proxy(s, ctx, req.Session, req.Params.GetProgressToken(), &mcp.ReadResourceParams{URI: req.Params.URI},
		func(cs *mcp.ClientSession, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
			return cs.ReadResource(ctx, p)
		})
}

func (s *server) getPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	return proxy(s, ctx, req.Session, req.Params.GetProgressToken(), &mcp.GetPromptParams{Name: req.Params.Name, Arguments: req.Params.Arguments},
		func(cs *mcp.ClientSession, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
			return cs.GetPrompt(ctx, p)
		})
}

func (s *server) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	p := *req.Params
	return proxy(s, ctx, req.Session, nil, noProgress{&p},
		func(cs *mcp.ClientSession, p noProgress) (*mcp.CompleteResult, error) {
			return cs.Complete(ctx, p.CompleteParams)
		})
}

// noProgress wraps the params of a request that carries no progress token.
type noProgress struct{ *mcp.CompleteParams }

func (noProgress) SetProgressToken(any) {}

// remirror lists the server's features again after it said they changed.
func (s *server) remirror() {
	s.mu.Lock()
	up := s.up
	s.mu.Unlock()
	if up == nil {
		return
	}
	s.m.wg.Add(1)
	go func() {
		defer s.m.wg.Done()
		ctx, cancel := context.WithTimeout(s.m.ctx, 30*time.Second)
		defer cancel()
		if err := s.mirror(ctx, up); err != nil {
			s.log.Warn("listing the shared MCP server's features again", "err", err)
		}
	}()
}

// mirror lists the server's tools, prompts, resources and resource
// templates and puts them on the face, which tells every agent's
// session of a change.
func (s *server) mirror(ctx context.Context, up *upstream) error {
	s.mirrorMu.Lock()
	defer s.mirrorMu.Unlock()
	caps := up.cs.InitializeResult().Capabilities
	want := map[string]string{}
	var adds []func()
	add := func(key string, v any, do func()) {
		raw, _ := json.Marshal(v)
		want[key] = string(raw)
		if s.mirrored[key] != string(raw) {
			adds = append(adds, do)
		}
	}
	if caps != nil && caps.Tools != nil {
		for t, err := range up.cs.Tools(ctx, nil) {
			if err != nil {
				return err
			}
			add("tool:"+t.Name, t, func() { s.addTool(t) })
		}
	}
	if caps != nil && caps.Prompts != nil {
		for p, err := range up.cs.Prompts(ctx, nil) {
			if err != nil {
				return err
			}
			add("prompt:"+p.Name, p, func() { s.face.AddPrompt(p, s.getPrompt) })
		}
	}
	if caps != nil && caps.Resources != nil {
		for r, err := range up.cs.Resources(ctx, nil) {
			if err != nil {
				return err
			}
			add("resource:"+r.URI, r, func() { s.face.AddResource(r, s.readResource) })
		}
		for t, err := range up.cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				return err
			}
			add("template:"+t.URITemplate, t, func() { s.face.AddResourceTemplate(t, s.readResource) })
		}
	}
	var tools, prompts, resources, templates []string
	for key := range s.mirrored {
		if _, ok := want[key]; ok {
			continue
		}
		kind, name, _ := strings.Cut(key, ":")
		switch kind {
		case "tool":
			tools = append(tools, name)
		case "prompt":
			prompts = append(prompts, name)
		case "resource":
			resources = append(resources, name)
		case "template":
			templates = append(templates, name)
		}
	}
	if len(tools) > 0 {
		s.face.RemoveTools(tools...)
	}
	if len(prompts) > 0 {
		s.face.RemovePrompts(prompts...)
	}
	if len(resources) > 0 {
		s.face.RemoveResources(resources...)
	}
	if len(templates) > 0 {
		s.face.RemoveResourceTemplates(templates...)
	}
	for _, do := range adds {
		do()
	}
	s.mirrored = want
	return nil
}

// addTool puts t on the face; the SDK refuses (panics on) a tool whose
// input schema is not an object schema, which is skipped.
func (s *server) addTool(t *mcp.Tool) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Warn("a tool of the shared MCP server is not passed on", "tool", t.Name, "why", r)
		}
	}()
	s.face.AddTool(t, s.callTool)
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
