package acp

import (
	"context"
	"encoding/json"
	"errors"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
)

// client answers the agent's requests. The SDK runs each request on its own
// goroutine, so these may run concurrently and overtake updates.
type client struct{ b *Backend }

var _ acpsdk.Client = client{}

// syncEvents waits until every update queued before this request has been
// delivered, so the events a request causes (fs audit, permission asked)
// follow the updates the agent sent before it.
func (c client) syncEvents() { c.b.queue.waitDelivered(c.b.queue.pushedCount()) }

func (c client) ReadTextFile(ctx context.Context, p acpsdk.ReadTextFileRequest) (acpsdk.ReadTextFileResponse, error) {
	c.syncEvents()
	if c.b.cfg.FS == nil {
		return acpsdk.ReadTextFileResponse{}, acpsdk.NewMethodNotFound("fs/read_text_file")
	}
	content, err := c.b.cfg.FS.ReadTextFile(c.b.withBridgeCheck(ctx), p.Path, p.Line, p.Limit)
	if err != nil {
		return acpsdk.ReadTextFileResponse{}, toRequestError(err)
	}
	return acpsdk.ReadTextFileResponse{Content: content}, nil
}

func (c client) WriteTextFile(ctx context.Context, p acpsdk.WriteTextFileRequest) (acpsdk.WriteTextFileResponse, error) {
	c.syncEvents()
	if c.b.cfg.FS == nil {
		return acpsdk.WriteTextFileResponse{}, acpsdk.NewMethodNotFound("fs/write_text_file")
	}
	if err := c.b.cfg.FS.WriteTextFile(c.b.withBridgeCheck(ctx), p.Path, p.Content); err != nil {
		return acpsdk.WriteTextFileResponse{}, toRequestError(err)
	}
	return acpsdk.WriteTextFileResponse{}, nil
}

// SessionUpdate is not reached: the line filter handles session/update
// before the SDK sees it. It queues the update anyway, never blocking.
func (c client) SessionUpdate(_ context.Context, n acpsdk.SessionNotification) error {
	raw, err := json.Marshal(n)
	if err != nil {
		return err
	}
	return c.b.handleUpdate(raw)
}

func (c client) RequestPermission(ctx context.Context, p acpsdk.RequestPermissionRequest) (acpsdk.RequestPermissionResponse, error) {
	c.syncEvents()
	req := PermissionRequest{ToolCallID: string(p.ToolCall.ToolCallId)}
	if p.ToolCall.Title != nil {
		req.Title = *p.ToolCall.Title
	}
	if p.ToolCall.Kind != nil {
		req.Kind = string(*p.ToolCall.Kind)
	}
	if req.Kind == "" {
		// Left out: the kind its tool_call announced (toolcalls.go). If
		// that is unknown too, the policy treats the request as the
		// strictest of its tool kinds.
		c.b.mu.Lock()
		req.Kind = c.b.toolCalls.kind(req.ToolCallID)
		c.b.mu.Unlock()
	}
	for _, l := range p.ToolCall.Locations {
		req.Locations = append(req.Locations, l.Path)
	}
	if p.ToolCall.RawInput != nil {
		req.RawInput = backends.MustJSON(p.ToolCall.RawInput)
	}
	for _, o := range p.Options {
		req.Options = append(req.Options, PermissionOption{ID: string(o.OptionId), Name: o.Name, Kind: string(o.Kind)})
	}
	b := c.b
	b.mu.Lock()
	permCtx := b.permCtx
	if b.turn != nil {
		req.Turn = b.turn.id
	}
	b.mu.Unlock()
	// The request ends when the SDK drops it, the agent ends, or the turn
	// is cancelled (session/cancel answers pending requests "cancelled").
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	unhook := context.AfterFunc(permCtx, stop)
	defer unhook()

	var out PermissionOutcome
	if b.cfg.Permissions == nil {
		out = rejectWithoutHandler(req)
		b.cfg.OnEvent(backends.NewEvent(backends.EventPermissionResolved, b.cfg.Spec.Provider, map[string]any{
			"tool_call_id": req.ToolCallID, "title": req.Title, "decided_by": "no_handler",
			"option_id": out.OptionID, "cancelled": out.Cancelled,
			"reason": "no permission handler is configured: rejected",
		}))
	} else {
		var err error
		out, err = b.cfg.Permissions(ctx, req)
		if err != nil || ctx.Err() != nil {
			out = PermissionOutcome{Cancelled: true}
		}
	}
	if out.Cancelled || out.OptionID == "" {
		return acpsdk.RequestPermissionResponse{Outcome: acpsdk.RequestPermissionOutcome{Cancelled: &acpsdk.RequestPermissionOutcomeCancelled{}}}, nil
	}
	return acpsdk.RequestPermissionResponse{Outcome: acpsdk.RequestPermissionOutcome{Selected: &acpsdk.RequestPermissionOutcomeSelected{OptionId: acpsdk.PermissionOptionId(out.OptionID)}}}, nil
}

// rejectWithoutHandler picks a reject option by kind; never an allow.
func rejectWithoutHandler(req PermissionRequest) PermissionOutcome {
	for _, kind := range []string{"reject_once", "reject_always"} {
		for _, o := range req.Options {
			if o.Kind == kind {
				return PermissionOutcome{OptionID: o.ID}
			}
		}
	}
	return PermissionOutcome{Cancelled: true}
}

func (c client) CreateTerminal(ctx context.Context, p acpsdk.CreateTerminalRequest) (acpsdk.CreateTerminalResponse, error) {
	c.syncEvents()
	t := c.b.cfg.Terminals
	if t == nil {
		return acpsdk.CreateTerminalResponse{}, acpsdk.NewMethodNotFound("terminal/create")
	}
	req := acpfs.TerminalRequest{Command: p.Command, Args: p.Args, OutputByteLimit: p.OutputByteLimit}
	if p.Cwd != nil {
		req.Cwd = *p.Cwd
	}
	if len(p.Env) > 0 {
		for _, e := range p.Env {
			req.Env = append(req.Env, acpfs.EnvVar{Name: e.Name, Value: e.Value})
		}
	}
	id, err := t.Create(c.b.withBridgeCheck(ctx), req)
	if err != nil {
		return acpsdk.CreateTerminalResponse{}, toRequestError(err)
	}
	return acpsdk.CreateTerminalResponse{TerminalId: id}, nil
}

func (c client) TerminalOutput(_ context.Context, p acpsdk.TerminalOutputRequest) (acpsdk.TerminalOutputResponse, error) {
	t := c.b.cfg.Terminals
	if t == nil {
		return acpsdk.TerminalOutputResponse{}, acpsdk.NewMethodNotFound("terminal/output")
	}
	out, err := t.Output(p.TerminalId)
	if err != nil {
		return acpsdk.TerminalOutputResponse{}, toRequestError(err)
	}
	resp := acpsdk.TerminalOutputResponse{Output: out.Output, Truncated: out.Truncated}
	if out.Exit != nil {
		resp.ExitStatus = &acpsdk.TerminalExitStatus{ExitCode: out.Exit.ExitCode, Signal: out.Exit.Signal}
	}
	return resp, nil
}

func (c client) WaitForTerminalExit(ctx context.Context, p acpsdk.WaitForTerminalExitRequest) (acpsdk.WaitForTerminalExitResponse, error) {
	t := c.b.cfg.Terminals
	if t == nil {
		return acpsdk.WaitForTerminalExitResponse{}, acpsdk.NewMethodNotFound("terminal/wait_for_exit")
	}
	st, err := t.WaitForExit(ctx, p.TerminalId)
	if err != nil {
		return acpsdk.WaitForTerminalExitResponse{}, toRequestError(err)
	}
	return acpsdk.WaitForTerminalExitResponse{ExitCode: st.ExitCode, Signal: st.Signal}, nil
}

func (c client) KillTerminal(_ context.Context, p acpsdk.KillTerminalRequest) (acpsdk.KillTerminalResponse, error) {
	t := c.b.cfg.Terminals
	if t == nil {
		return acpsdk.KillTerminalResponse{}, acpsdk.NewMethodNotFound("terminal/kill")
	}
	if err := t.Kill(p.TerminalId); err != nil {
		return acpsdk.KillTerminalResponse{}, toRequestError(err)
	}
	return acpsdk.KillTerminalResponse{}, nil
}

func (c client) ReleaseTerminal(_ context.Context, p acpsdk.ReleaseTerminalRequest) (acpsdk.ReleaseTerminalResponse, error) {
	t := c.b.cfg.Terminals
	if t == nil {
		return acpsdk.ReleaseTerminalResponse{}, acpsdk.NewMethodNotFound("terminal/release")
	}
	if err := t.Release(p.TerminalId); err != nil {
		return acpsdk.ReleaseTerminalResponse{}, toRequestError(err)
	}
	return acpsdk.ReleaseTerminalResponse{}, nil
}

// toRequestError maps bridge errors to JSON-RPC errors: a missing file (or
// cwd, or terminal) is -32002 "Resource not found"; a refused path (outside,
// .git, not a regular file, a file where a directory is needed, too large,
// not text) or a terminal over a limit is -32602 with the reason; a
// permission refusal is CodePermissionDenied; anything else is -32603 with
// the details.
func toRequestError(err error) *acpsdk.RequestError {
	var re *acpsdk.RequestError
	if errors.As(err, &re) {
		return re
	}
	data := map[string]any{"details": err.Error()}
	switch {
	case errors.Is(err, acpfs.ErrPermissionDenied):
		return &acpsdk.RequestError{Code: CodePermissionDenied, Message: "Permission denied", Data: data}
	case errors.Is(err, acpfs.ErrNotFound), errors.Is(err, acpfs.ErrUnknownTerminal):
		return &acpsdk.RequestError{Code: -32002, Message: "Resource not found", Data: data}
	case errors.Is(err, acpfs.ErrRelativePath), errors.Is(err, acpfs.ErrOutsideRoot), errors.Is(err, acpfs.ErrNulByte),
		errors.Is(err, acpfs.ErrSymlinkLoop), errors.Is(err, acpfs.ErrGitDir), errors.Is(err, acpfs.ErrTooLarge),
		errors.Is(err, acpfs.ErrNotText), errors.Is(err, acpfs.ErrIsDirectory), errors.Is(err, acpfs.ErrNotDirectory),
		errors.Is(err, acpfs.ErrNotRegular), errors.Is(err, acpfs.ErrTooManyTerminals),
		errors.Is(err, acpfs.ErrRetentionLimit):
		return acpsdk.NewInvalidParams(data)
	case errors.Is(err, context.Canceled):
		return acpsdk.NewRequestCancelled(data)
	default:
		return acpsdk.NewInternalError(data)
	}
}
