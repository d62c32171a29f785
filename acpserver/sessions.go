package acpserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	acp "github.com/coder/acp-go-sdk"
)

// session is a pool session this connection serves (created, loaded or
// resumed by the editor).
type session struct {
	id   string
	repo string
	// answered is closed once the editor has the session's id (the
	// answer of session/new, load or resume is on its way): updates sent
	// before could name a session it does not know yet.
	answered chan struct{}
	stop     context.CancelFunc
	done     chan struct{}

	mu sync.Mutex
	// agent is the session's agent as the editor chose it: the agent of
	// its next prompt.
	agent string
	// prompting is true while a session/prompt of the editor runs;
	// promptText is its text and ourTurn its turn once known.
	prompting  bool
	promptText string
	ourTurn    int64
	// waiters wait for the end of a turn; ended keeps the ends of recent
	// turns that nobody waited for yet (bounded by maxEnded).
	waiters map[int64]chan turnEnd
	ended   map[int64]turnEnd
	// asked are the permission requests sent to the editor, by request
	// id: cancelling one withdraws the editor's request.
	asked map[string]context.CancelFunc

	// announce runs the announcements of what the agent offers
	// (announceLater).
	announce announcer
}

// turnEnd is how a turn ended, from its turn.ended event.
type turnEnd struct {
	StopReason string `json:"stop_reason"`
	Error      string `json:"error"`
}

// maxEnded bounds session.ended.
const maxEnded = 64

// answer marks the session as known to the editor.
func (ss *session) answer() {
	select {
	case <-ss.answered:
	default:
		close(ss.answered)
	}
}

// currentAgent returns the editor's choice of agent.
func (ss *session) currentAgent() string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.agent
}

// sessionOf returns the attached session id, or a not-found error.
func (s *Server) sessionOf(id acp.SessionId) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[string(id)]
	if ss == nil {
		return nil, notFound(fmt.Sprintf("session %s is not open in this editor connection: load or resume it first (session/load, session/resume), or start a new one", id))
	}
	return ss, nil
}

// attach starts serving pool session ps to the editor: its events after
// seq after reach the editor as session/update notifications. A session
// already attached is detached first.
func (s *Server) attach(ps pool.Session, agent string, after int64) *session {
	ss := &session{id: ps.ID, repo: ps.Repo, agent: agent, answered: make(chan struct{}), done: make(chan struct{}),
		waiters: map[int64]chan turnEnd{}, ended: map[int64]turnEnd{}, asked: map[string]context.CancelFunc{}}
	ctx, cancel := context.WithCancel(s.ctx)
	ss.stop = cancel
	s.mu.Lock()
	old := s.sessions[ps.ID]
	s.sessions[ps.ID] = ss
	s.mu.Unlock()
	if old != nil {
		old.stop()
		<-old.done
	}
	s.goOwned(func() {
		defer close(ss.done)
		s.follow(ctx, ss, after)
	})
	return ss
}

// detach stops serving session id.
func (s *Server) detach(id string) {
	s.mu.Lock()
	ss := s.sessions[id]
	delete(s.sessions, id)
	s.mu.Unlock()
	if ss != nil {
		ss.stop()
		<-ss.done
	}
}

// NewSession creates a pool session for the git repository holding cwd,
// adopting a spare when the daemon keeps one, with the editor's MCP
// servers as the session's own.
func (s *Server) NewSession(ctx context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	api, err := s.api(ctx)
	if err != nil {
		return acp.NewSessionResponse{}, err
	}
	top, err := s.repoOf(ctx, p.Cwd)
	if err != nil {
		return acp.NewSessionResponse{}, err
	}
	servers, err := mcpServers(p.McpServers)
	if err != nil {
		return acp.NewSessionResponse{}, err
	}
	agent := s.cfg.DefaultAgent
	provs := s.providersAsync(ctx, api)
	ps, err := api.CreateSession(ctx, pool.CreateRequest{Repo: top, Agent: agent, MCPServers: servers})
	if err != nil {
		return acp.NewSessionResponse{}, reqErr(fmt.Errorf("create a session of %s: %w", top, err))
	}
	if ps.ActiveAgent != "" {
		agent = ps.ActiveAgent // the daemon's choice when agent was ""
	}
	ss := s.attach(ps, agent, ps.LastSeq)
	defer ss.answer()
	opts, modes := s.optionsOf(ctx, api, ss, <-provs)
	s.logger.Info("session created", "session", ps.ID, "repo", top, "agent", agent)
	return acp.NewSessionResponse{SessionId: acp.SessionId(ps.ID), ConfigOptions: opts, Modes: modes}, nil
}

// LoadSession attaches a pool session and replays its history (its
// stored events) as session/update notifications before answering.
func (s *Server) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	opts, modes, err := s.reopen(ctx, string(p.SessionId), p.Cwd, true)
	return acp.LoadSessionResponse{ConfigOptions: opts, Modes: modes}, err
}

// ResumeSession attaches a pool session without replaying its history.
func (s *Server) ResumeSession(ctx context.Context, p acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	opts, modes, err := s.reopen(ctx, string(p.SessionId), p.Cwd, false)
	return acp.ResumeSessionResponse{ConfigOptions: opts, Modes: modes}, err
}

// reopen attaches an open pool session, replaying its history first when
// replay is set. The editor's MCP servers are not applied: a session keeps
// those it was created with.
func (s *Server) reopen(ctx context.Context, id, cwd string, replay bool) ([]acp.SessionConfigOption, *acp.SessionModeState, error) {
	api, err := s.api(ctx)
	if err != nil {
		return nil, nil, err
	}
	ps, err := api.Session(ctx, id)
	if httpapi.IsCode(err, httpapi.CodeNotFound) {
		return nil, nil, notFound(fmt.Sprintf("there is no pool session %s: session/list (the editor's thread history) shows the sessions of this repository, and agentpool session list all of them", id))
	}
	if err != nil {
		return nil, nil, reqErr(fmt.Errorf("session %s: %w", id, err))
	}
	if ps.Status != pool.StatusOpen {
		return nil, nil, invalid(fmt.Sprintf("session %s is %s; its work is on branch %s: start a new session", id, ps.Status, ps.Worktree.Branch))
	}
	if cwd != "" && filepath.IsAbs(cwd) {
		if top, err := s.cfg.GitTopLevel(ctx, cwd); err == nil && !sameDir(top, ps.Repo) {
			s.logger.Warn("session of another repository reopened", "session", id, "cwd", cwd, "repo", ps.Repo)
		}
	}
	provs := s.providersAsync(ctx, api)
	after := ps.LastSeq
	var history []backends.Event
	if replay {
		if history, err = api.EventLog(ctx, id, 0); err != nil {
			return nil, nil, reqErr(fmt.Errorf("read the history of session %s: %w", id, err))
		}
		if n := len(history); n > 0 {
			after = max(after, history[n-1].Seq)
		}
	}
	agent := ps.ActiveAgent
	if agent == "" {
		agent = s.cfg.DefaultAgent
	}
	if agent == "" {
		agent = httpapi.FallbackAgent
	}
	ss := s.attach(ps, agent, after)
	defer ss.answer()
	// The replay is sent before the answer, as the spec has it; the
	// follower sends nothing before the answer (see follow).
	for _, ev := range history {
		s.dispatch(ctx, ss, ev, true)
	}
	opts, modes := s.optionsOf(ctx, api, ss, <-provs)
	s.logger.Info("session reopened", "session", id, "replayed", len(history))
	return opts, modes, nil
}

// ListSessions lists the open pool sessions of the repository holding
// cwd (all open sessions without cwd), most recently updated first. Their
// cwd is that repository; _meta.agentpool names the worktree and branch.
func (s *Server) ListSessions(ctx context.Context, p acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	api, err := s.api(ctx)
	if err != nil {
		return acp.ListSessionsResponse{}, err
	}
	var top string
	if p.Cwd != nil && *p.Cwd != "" {
		if top, err = s.repoOf(ctx, *p.Cwd); err != nil {
			return acp.ListSessionsResponse{}, err
		}
	}
	all, err := api.Sessions(ctx)
	if err != nil {
		return acp.ListSessionsResponse{}, reqErr(fmt.Errorf("list sessions: %w", err))
	}
	slices.SortStableFunc(all, func(a, b pool.Session) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	all = slices.DeleteFunc(all, func(ps pool.Session) bool {
		return ps.Status != pool.StatusOpen || (top != "" && !sameDir(ps.Repo, top))
	})
	s.untitled(ctx, api, all)
	out := []acp.SessionInfo{}
	for _, ps := range all {
		info := acp.SessionInfo{SessionId: acp.SessionId(ps.ID), Cwd: ps.Repo,
			UpdatedAt: acp.Ptr(ps.UpdatedAt.UTC().Format(time.RFC3339Nano)),
			Meta: map[string]any{"agentpool": map[string]any{"worktree": ps.Worktree.Path, "branch": ps.Worktree.Branch,
				"agent": ps.ActiveAgent, "busy": ps.Busy}}}
		if ps.Title != "" {
			info.Title = acp.Ptr(ps.Title)
		}
		out = append(out, info)
	}
	return acp.ListSessionsResponse{Sessions: out}, nil
}

// titleRunes bounds a title made of a session's first prompt.
const titleRunes = 80

// untitled gives each of sessions that has no title of its own its first
// prompt's first line as title, as an editor titles a thread by its first
// message; a session with no turn yet keeps none. The turns are read a
// few sessions at a time; a session whose turns cannot be read keeps no
// title.
func (s *Server) untitled(ctx context.Context, api API, sessions []pool.Session) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range sessions {
		if sessions[i].Title != "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(ps *pool.Session) {
			defer func() { <-sem; wg.Done() }()
			turns, err := api.Turns(ctx, ps.ID)
			if err != nil || len(turns) == 0 {
				s.logger.Debug("turns of an untitled session", "session", ps.ID, "err", err)
				return
			}
			ps.Title = titleOf(turns[0].Prompt)
		}(&sessions[i])
	}
	wg.Wait()
}

// titleOf is a title made of a prompt: its first non-empty line, at most
// titleRunes long.
func titleOf(prompt string) string {
	for line := range strings.Lines(prompt) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if r := []rune(line); len(r) > titleRunes {
			line = strings.TrimSpace(string(r[:titleRunes-1])) + "…"
		}
		return line
	}
	return ""
}

// CloseSession closes the pool session as `agentpool session close`
// does: a running turn is cancelled and the work is kept on the session's
// branch.
func (s *Server) CloseSession(ctx context.Context, p acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	api, err := s.api(ctx)
	if err != nil {
		return acp.CloseSessionResponse{}, err
	}
	id := string(p.SessionId)
	res, err := api.CloseSession(ctx, id, false)
	if err != nil {
		return acp.CloseSessionResponse{}, reqErr(fmt.Errorf("close session %s: %w", id, err))
	}
	s.detach(id)
	s.logger.Info("session closed", "session", id, "result", res)
	return acp.CloseSessionResponse{}, nil
}

// providersAsync reads the providers on a goroutine, for a request that
// has other calls to make meanwhile; a failure gives an empty snapshot.
func (s *Server) providersAsync(ctx context.Context, api API) <-chan registry.Snapshot {
	ch := make(chan registry.Snapshot, 1)
	go func() {
		snap, err := api.Providers(ctx)
		if err != nil {
			s.logger.Warn("read providers", "err", err)
		}
		ch <- snap
	}()
	return ch
}

// repoOf returns the top directory of the git repository holding cwd.
func (s *Server) repoOf(ctx context.Context, cwd string) (string, error) {
	if cwd == "" || !filepath.IsAbs(cwd) {
		return "", invalid(fmt.Sprintf("cwd %q is not an absolute path: open a folder inside a git repository", cwd))
	}
	if top, ok := s.tops.Load(cwd); ok && stillTop(cwd, top.(string)) {
		return top.(string), nil
	}
	top, err := s.cfg.GitTopLevel(ctx, cwd)
	if err != nil {
		return "", invalid(err.Error())
	}
	s.tops.Store(cwd, top)
	return top, nil
}

// stillTop reports whether top, which git named as the top of cwd's
// repository, still is: it has its .git, and no directory from cwd up
// to it has one of its own (a repository made inside since). An editor
// opens every thread in the same folder; this spares each new one a git
// process. A repository that is no longer one is refused by the daemon.
func stillTop(cwd, top string) bool {
	rel, err := filepath.Rel(top, cwd)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return false
	}
	if _, err := os.Lstat(filepath.Join(top, ".git")); err != nil {
		return false
	}
	for dir := filepath.Clean(cwd); dir != filepath.Clean(top); dir = filepath.Dir(dir) {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil || dir == filepath.Dir(dir) {
			return false
		}
	}
	return true
}

// gitTopLevel returns the top directory of the git repository holding
// dir, or an error a person can act on.
func gitTopLevel(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--show-toplevel")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if ctx.Err() != nil {
			// The editor went away (or cancelled) while git ran: say so,
			// not that the folder is no repository.
			return "", fmt.Errorf("find the git repository of %s: %w", dir, context.Cause(ctx))
		}
		msg := strings.TrimSpace(stderr.String())
		if msg != "" && !strings.Contains(msg, "not a git repository") {
			return "", fmt.Errorf("git cannot use %s: %s", dir, strings.TrimPrefix(strings.SplitN(msg, "\n", 2)[0], "fatal: "))
		}
		return "", fmt.Errorf("%s is not inside a git repository: agentpool works on git repositories (run git init there, or open a folder of a repository)", dir)
	}
	return strings.TrimSpace(string(out)), nil
}

// sameDir reports whether a and b name the same directory.
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// mcpServers converts the editor's MCP servers into the session's.
func mcpServers(in []acp.McpServer) (backends.MCPServers, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := backends.MCPServers{}
	for i, m := range in {
		var name string
		var srv backends.MCPServer
		switch {
		case m.Stdio != nil:
			name = m.Stdio.Name
			srv = backends.MCPServer{Command: m.Stdio.Command, Args: m.Stdio.Args, Env: envMap(m.Stdio.Env)}
		case m.Http != nil:
			name = m.Http.Name
			srv = backends.MCPServer{Type: backends.MCPHTTP, URL: m.Http.Url, Headers: headerMap(m.Http.Headers)}
		case m.Sse != nil:
			name = m.Sse.Name
			srv = backends.MCPServer{Type: backends.MCPSSE, URL: m.Sse.Url, Headers: headerMap(m.Sse.Headers)}
		default:
			return nil, invalid(fmt.Sprintf("mcpServers[%d]: a transport agentpool cannot pass to agents (stdio, http and sse are)", i))
		}
		if _, dup := out[name]; dup {
			return nil, invalid(fmt.Sprintf("mcpServers[%d]: a second server named %q", i, name))
		}
		out[name] = srv
	}
	if err := out.Validate("mcpServers"); err != nil {
		return nil, invalid(err.Error())
	}
	return out, nil
}

func envMap(vs []acp.EnvVariable) map[string]string {
	if len(vs) == 0 {
		return nil
	}
	m := make(map[string]string, len(vs))
	for _, v := range vs {
		m[v.Name] = v.Value
	}
	return m
}

func headerMap(hs []acp.HttpHeader) map[string]string {
	if len(hs) == 0 {
		return nil
	}
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.Name] = h.Value
	}
	return m
}
