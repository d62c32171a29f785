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

// explained is a confined ACP backend whose failed Start says which paths
// the sandbox denied the agent, and which "sandbox" entry would allow
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
	if err == nil {
		return info, nil
	}
	var text string
	if ee := (*backends.ExitError)(nil); errors.As(err, &ee) {
		text = ee.StderrTail
	}
	if text == "" {
		text = err.Error()
	}
	denied := e.res.Explain(text)
	if len(denied) == 0 {
		return info, err
	}
	agent := e.req.Spec.Provider
	lines := make([]string, len(denied))
	for i, n := range denied {
		lines[i] = n.String()
	}
	e.logger.Warn("sandbox denied the agent paths it needed to start", "agent", agent, "denied", lines)
	e.req.Emit(backends.NewEvent(backends.EventSandboxRefused, agent, backends.SandboxEventData{Refused: e.res.Notes, Denied: denied}))
	err = &deniedError{err: err, lines: lines}
	if e.l.Report != nil {
		e.l.Report(agent, e.req.Spec, registry.LaunchReport{Session: e.req.Session, Refused: e.res.Notes, Denied: denied, Error: err.Error()})
	}
	return info, err
}

// deniedError is a start error with the paths the sandbox denied.
type deniedError struct {
	err   error
	lines []string
}

// Error names the denied paths first, then the start's own error.
func (d *deniedError) Error() string {
	return fmt.Sprintf("sandbox: %s\n%v", strings.Join(d.lines, "\nsandbox: "), d.err)
}

func (d *deniedError) Unwrap() error { return d.err }
