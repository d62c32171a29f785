package wiring

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/pty"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/pool"
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
}

var _ pool.Launcher = Launcher{}

// Launch returns an unstarted backend for req.
func (l Launcher) Launch(req pool.LaunchRequest) (backends.Backend, error) {
	logger := l.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("session", req.Session)
	agent := req.Spec.Provider
	jail, termJail, dropped, err := l.Confiner.agentJail(req)
	if err != nil {
		return nil, fmt.Errorf("confine agent %q: %w", agent, err)
	}
	if len(dropped) > 0 {
		logger.Warn("sandbox grants refused: they would expose the daemon's home, a secret or the main checkout", "agent", agent, "paths", dropped)
	}
	b, err := l.launch(req, logger, jail, termJail)
	if err != nil && jail != nil {
		_ = jail.Release()
	}
	return b, err
}

func (l Launcher) launch(req pool.LaunchRequest, logger *slog.Logger, jail backends.Jail, termJail func(string) (*sandbox.Jail, error)) (backends.Backend, error) {
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
			Env: backends.AgentEnv(), NewJail: newJail,
			OnEvent: func(ev acpfs.TerminalEvent) { req.Emit(backends.NewEvent(backends.EventType(ev.Type), agent, ev)) }})
		if err != nil {
			_ = fs.Close()
			return nil, fmt.Errorf("terminals: %w", err)
		}
		var wire func(bool, []byte)
		if os.Getenv("AGENTPOOL_DEBUG_WIRE") != "" {
			wire = func(in bool, line []byte) { fmt.Fprintf(os.Stderr, "WIRE %v %s\n", in, clip(line)) }
		}
		b, err := acp.New(acp.Config{Spec: req.Spec, FS: fs, Terminals: closeBoth{terms, fs}, Permissions: req.Permission, OnEvent: req.Emit, Logger: logger, Wire: wire, Jail: jail})
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
