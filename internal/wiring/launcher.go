package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/pty"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/mcpshare"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	"github.com/agentpool/agentpool/worktree"
)

// Launcher builds backends: ACP agents get the worktree's fs bridge and
// terminals, whose audit records become fs.* and terminal.* events;
// terminal programs get the PTY backend.
type Launcher struct {
	Logger *slog.Logger
	// MaxFileSize caps fs reads and writes (0 = acpfs default).
	MaxFileSize int64
	// Confiner puts each agent and each of its terminals in a jail of its
	// own; its zero value launches without confinement.
	Confiner Confiner
	// Report, if set, receives what the sandbox said of each confined
	// launch (nothing refused, nothing denied included): the registry
	// shows it on the provider's status.
	Report func(provider string, spec backends.Spec, rep registry.LaunchReport)
	// Identity, if set, gives the git identity of a repository: agents and
	// their terminals get it in their environment (see identityEnv).
	Identity func(ctx context.Context, repo string) worktree.Identity
	// MCP, if set, runs the stdio MCP servers that can be shared once for
	// the daemon: an ACP agent gets each as an http server of the
	// daemon's, or as RelayCommand's relay to it (nil: every agent starts
	// its own copy of every server).
	MCP *mcpshare.Manager
	// RelayCommand is the agentpool binary an agent that takes stdio MCP
	// servers only runs as the relay to a shared one ("" shares nothing
	// with such agents).
	RelayCommand string
}

var (
	_ pool.Launcher      = Launcher{}
	_ pool.EarlyLauncher = Launcher{}
)

// LaunchEarly starts a confined ACP agent's launcher before its session's
// worktree exists (see pool.EarlyLauncher).
func (l Launcher) LaunchEarly(spec backends.Spec, session string) (pool.Early, bool) {
	if spec.Kind != backends.KindACP {
		return nil, false
	}
	return l.Confiner.launchEarly(spec, session)
}

// Launch returns an unstarted backend for req.
func (l Launcher) Launch(req pool.LaunchRequest) (backends.Backend, error) {
	logger := l.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("session", req.Session)
	agent := req.Spec.Provider
	id := identityOf(l.Identity, req.Worktree.Repo)
	servers := req.Spec.MCPServers.Merge(req.MCPServers)
	plan, lease, err := l.mcpPlan(req, servers)
	if err != nil {
		if req.Early != nil {
			req.Early.Close()
		}
		return nil, err
	}
	share := ""
	if lease != nil {
		share = l.MCP.Addr()
	}
	jail, termJail, res, err := l.Confiner.agentJail(req, share, l.RelayCommand)
	if err != nil {
		if lease != nil {
			lease.Release()
		}
		return nil, fmt.Errorf("confine agent %q: %w", agent, err)
	}
	if lease != nil {
		jail = newLeaseJail(jail, lease)
	}
	if res != nil {
		l.refused(req, logger, res)
	}
	// The spec stays as resolved for the reports (the registry compares
	// it with its own); only the process gets the identity.
	run := req
	run.Spec.Env = append(slices.Clone(req.Spec.Env), identityEnv(backends.AgentEnv(req.Spec), id)...)
	// Likewise the session's own MCP servers, which win by name.
	run.Spec.MCPServers = servers
	// The bridge's terminals start from the variables of the daemon's
	// environment the agent gets (not the provider's own env), with the
	// identity; a terminal/create adds what it asks for.
	// Never nil: a nil Env would give them the daemon's whole one.
	passed := backends.PassedEnv(req.Spec)
	termEnv := append(append(make([]string, 0, len(passed)+5), passed...), identityEnv(passed, id)...)
	b, err := l.launch(run, logger, jail, termJail, termEnv, plan)
	if err != nil && jail != nil {
		_ = jail.Release()
	}
	if err == nil && res != nil && req.Spec.Kind == backends.KindACP {
		// A PTY agent's output is its screen, no stderr to explain.
		b = explained{Backend: b, l: l, req: req, res: res, logger: logger}
	}
	return b, err
}

// refused logs, emits and reports the grants the sandbox refused for a
// launch. Only those the user asked for are warned about: a derived grant
// that is refused (the directory of a program built in the main checkout)
// costs nothing, the program itself being granted.
func (l Launcher) refused(req pool.LaunchRequest, logger *slog.Logger, res *sandbox.PolicyResult) {
	agent := req.Spec.Provider
	for _, f := range res.Refused {
		if !f.Shown() {
			logger.Debug("sandbox: derived grant refused", "agent", agent, "path", f.Note.Path, "reason", f.Note.Reason)
		}
	}
	if len(res.Notes) > 0 {
		lines := make([]string, len(res.Notes))
		for i, n := range res.Notes {
			lines[i] = n.String()
		}
		logger.Warn("sandbox grants refused", "agent", agent, "refused", lines)
		req.Emit(backends.NewEvent(backends.EventSandboxRefused, agent, backends.SandboxEventData{Refused: res.Notes}))
	}
	if l.Report != nil {
		l.Report(agent, req.Spec, registry.LaunchReport{Session: req.Session, Refused: res.Notes})
	}
}

// launch builds the backend; termEnv is its terminals' environment.
func (l Launcher) launch(req pool.LaunchRequest, logger *slog.Logger, jail backends.Jail, termJail func(string) (*sandbox.Jail, error), termEnv []string, plan *backends.MCPPlan) (backends.Backend, error) {
	agent := req.Spec.Provider
	var newJail func(string) (acpfs.Jail, error)
	if termJail != nil {
		newJail = func(id string) (acpfs.Jail, error) { return termJail(id) }
	}
	switch req.Spec.Kind {
	case backends.KindACP:
		fs, err := acpfs.NewFS(acpfs.FSConfig{Root: req.Spec.Dir, MaxFileSize: l.MaxFileSize, MissingFileEmpty: req.Spec.Compat.MissingFileEmpty,
			Audit: func(op acpfs.Op) { req.Emit(backends.NewEvent(backends.EventType(op.Type), agent, op)) }})
		if err != nil {
			return nil, fmt.Errorf("fs bridge: %w", err)
		}
		terms, err := acpfs.NewTerminals(acpfs.TerminalsConfig{Root: req.Spec.Dir, Guard: fs.Guard(), Logger: logger,
			Env: termEnv, NewJail: newJail,
			OnEvent: func(ev acpfs.TerminalEvent) { req.Emit(backends.NewEvent(backends.EventType(ev.Type), agent, ev)) }})
		if err != nil {
			_ = fs.Close()
			return nil, fmt.Errorf("terminals: %w", err)
		}
		var wire func(bool, []byte)
		if os.Getenv("AGENTPOOL_DEBUG_WIRE") != "" {
			wire = func(in bool, line []byte) { fmt.Fprintf(os.Stderr, "WIRE %v %s\n", in, clip(line)) }
		}
		b, err := acp.New(acp.Config{Spec: req.Spec, FS: fs, Terminals: closeBoth{terms, fs}, Permissions: req.Permission, OnEvent: req.Emit, Logger: logger, Wire: wire, Jail: jail, MCPPlan: plan})
		if err != nil {
			_ = terms.Close()
			_ = fs.Close()
			return nil, err
		}
		return b, nil
	case backends.KindPTY:
		// Terminal programs read and write files themselves: there is no
		// fs bridge to offer, and no ACP permission requests to route.
		return pty.New(pty.Config{Spec: req.Spec, BusyPattern: req.Spec.PTY.BusyPattern, OnEvent: req.Emit, Logger: logger, Jail: jail})
	default:
		return nil, fmt.Errorf("provider %q: kind %q: %w", agent, req.Spec.Kind, backends.ErrUnsupported)
	}
}

// closeBoth closes the fs bridge together with the terminals, which the
// ACP backend closes when its agent ends.
type closeBoth struct {
	*acpfs.Terminals
	fs *acpfs.FS
}

func (c closeBoth) Close() error {
	err := c.Terminals.Close()
	if ferr := c.fs.Close(); err == nil {
		err = ferr
	}
	return err
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

var _ pool.AuthNoter = (*registry.Registry)(nil)
