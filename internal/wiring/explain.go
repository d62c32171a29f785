package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
)

// explained is a confined ACP backend whose failed Start (or turn, when
// the agent crashed) says which paths the sandbox denied the agent, and which "sandbox" entry would allow
// each: Landlock tells userspace nothing, so the launcher's own check and
// the agent's permission errors in its stderr tail are read against the
// policy.
type explained struct {
	backends.Backend
	l      Launcher
	req    pool.LaunchRequest
	res    *sandbox.PolicyResult
	logger *slog.Logger
}

// Start starts the agent; a failure names the paths denied, if any.
func (e explained) Start(ctx context.Context, resume string) (backends.Info, error) {
	info, err := e.Backend.Start(ctx, resume)
	if err != nil {
		err = e.explain(err, "start")
	}
	return info, err
}

// StartFork starts the agent forking one of its sessions, when its
// backend can (backends.ForkStarter), else as Start without a resume; a
// failure names the paths denied, if any.
func (e explained) StartFork(ctx context.Context, from string) (backends.Info, error) {
	var info backends.Info
	var err error
	if f, ok := e.Backend.(backends.ForkStarter); ok {
		info, err = f.StartFork(ctx, from)
	} else {
		info, err = e.Backend.Start(ctx, "")
	}
	if err != nil {
		err = e.explain(err, "start")
	}
	return info, err
}

// Prompt runs a turn; an error (the agent crashed, its last stderr lines
// attached) names the paths denied, if any.
func (e explained) Prompt(ctx context.Context, p backends.Prompt, emit func(backends.Event)) (backends.TurnResult, error) {
	res, err := e.Backend.Prompt(ctx, p, emit)
	if err != nil {
		err = e.explain(err, "turn")
	}
	return res, err
}

// explain returns err with the paths the sandbox denied the agent, read
// from the stderr tail it carries, and reports them; err itself when
// there are none.
func (e explained) explain(err error, stage string) error {
	denied := e.res.Explain(stderrText(err))
	if len(denied) == 0 {
		return err
	}
	agent := e.req.Spec.Provider
	lines := noteLines(denied)
	e.logger.Warn("the sandbox denied the agent paths it needed", "agent", agent, "stage", stage, "denied", lines)
	e.req.Emit(backends.NewEvent(backends.EventSandboxRefused, agent, backends.SandboxEventData{Refused: e.res.Notes, Denied: denied}))
	err = &deniedError{err: err, lines: lines}
	if e.l.Report != nil {
		e.l.Report(agent, e.req.Spec, registry.LaunchReport{Session: e.req.Session, Refused: e.res.Notes, Denied: denied, Error: err.Error()})
	}
	return err
}

// stderrText is what a failed start or turn tells of the agent's
// output: the stderr tail it carries, else its own text.
func stderrText(err error) string {
	if ee := (*backends.ExitError)(nil); errors.As(err, &ee) && ee.StderrTail != "" {
		return ee.StderrTail
	}
	return err.Error()
}

// noteLines are notes in one line each.
func noteLines(notes []backends.SandboxNote) []string {
	lines := make([]string, len(notes))
	for i, n := range notes {
		lines[i] = n.String()
	}
	return lines
}

// deniedError is an error with the paths the sandbox denied.
type deniedError struct {
	err   error
	lines []string
}

// Error names the denied paths first, then the start's own error.
func (d *deniedError) Error() string {
	return fmt.Sprintf("sandbox: %s\n%v", strings.Join(d.lines, "\nsandbox: "), d.err)
}

func (d *deniedError) Unwrap() error { return d.err }

// CloseSession ends the agent's own session when its backend can (see
// backends.SessionCloser).
func (e explained) CloseSession(ctx context.Context) error {
	if sc, ok := e.Backend.(backends.SessionCloser); ok {
		return sc.CloseSession(ctx)
	}
	return fmt.Errorf("session/close: %w", backends.ErrUnsupported)
}
