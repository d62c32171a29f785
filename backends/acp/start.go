package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/backends"
)

// Start spawns the agent, performs initialize and session/new, or
// session/load of resume when the agent supports it. A failed load falls
// back to a new session and reports the lost context. ctx bounds the startup
// only; on failure the process is stopped and the error carries its exit
// status and stderr tail.
func (b *Backend) Start(ctx context.Context, resume string) (backends.Info, error) {
	b.mu.Lock()
	if b.started {
		b.mu.Unlock()
		return backends.Info{}, errors.New("acp backend: already started")
	}
	b.started = true
	b.mu.Unlock()
	spec := b.cfg.Spec
	proc, err := backends.StartProcess(backends.ProcessConfig{
		Path: spec.Path, Args: spec.Args, Env: backends.AgentEnv(spec), Dir: spec.Dir,
		StopGrace: b.cfg.StopGrace, KillGrace: b.cfg.KillGrace, Logger: b.logger, Jail: b.cfg.Jail,
	})
	if err != nil {
		b.mu.Lock()
		b.fatal = err
		b.mu.Unlock()
		if b.cfg.Terminals != nil {
			_ = b.cfg.Terminals.Close()
		}
		b.stopOnce.Do(func() { b.cancel(err); close(b.done) })
		return backends.Info{}, fmt.Errorf("start agent %q: %w", spec.Provider, err)
	}
	b.mu.Lock()
	b.proc = proc
	b.info = backends.Info{Provider: spec.Provider, Kind: backends.KindACP, PID: proc.PID(), PGID: proc.PID(), StartTicks: proc.StartTicks(), StartedAt: time.Now()}
	if b.cfg.Jail != nil {
		b.info.Confinement = b.cfg.Jail.Describe()
	}
	b.mu.Unlock()
	b.out = &guardedWriter{f: proc.Stdin(), timeout: b.cfg.WriteTimeout, wire: b.cfg.Wire, fail: b.fail, dropCancel: spec.Compat.NoCancelRequest}
	b.wg.Add(2)
	go func() { defer close(b.outputDone); b.filter(proc.Stdout()) }()
	go b.deliver()
	go b.watch(proc)

	info, err := b.handshake(ctx, resume)
	if err != nil {
		var ae *backends.AuthRequiredError
		if errors.As(err, &ae) {
			b.mu.Lock()
			ae.NoMethod = len(b.info.Auth) == 0
			b.mu.Unlock()
		}
		return backends.Info{}, b.startFailed(err)
	}
	return info, nil
}

// watch waits for the process to end, then tears the backend down.
func (b *Backend) watch(proc *backends.Process) {
	<-proc.Done()
	select {
	case <-b.outputDone:
	case <-time.After(time.Second):
		// Something outside the group still holds stdout open.
		_ = proc.Stdout().Close()
		<-b.outputDone
	}
	b.queue.close()
	b.cancel(backends.ErrExited)
	if b.cfg.Terminals != nil {
		if err := b.cfg.Terminals.Close(); err != nil {
			b.logger.Warn("close terminals", "err", err)
		}
	}
	b.wg.Wait()
	b.waitLinks()
	ee := proc.ExitError()
	b.mu.Lock()
	fatal := b.fatal
	if fatal != nil {
		b.fatal = errors.Join(fatal, ee)
	}
	b.mu.Unlock()
	data := backends.ExitData{PID: ee.PID, Status: ee.Status, Expected: ee.Expected && fatal == nil, StderrTail: ee.StderrTail}
	ev := backends.NewEvent(backends.EventAgentExited, b.cfg.Spec.Provider, data)
	if fatal != nil {
		ev = backends.NewEvent(backends.EventAgentExited, b.cfg.Spec.Provider, struct {
			backends.ExitData
			Error string `json:"error"`
		}{data, fatal.Error()})
	}
	b.cfg.OnEvent(ev)
	b.stopOnce.Do(func() { close(b.done) })
}

// startFailedOutputWait bounds how long a failed start waits for the end
// of the agent's output before it stops the agent (one that is still
// running, say whose handshake timed out).
const startFailedOutputWait = 200 * time.Millisecond

// startFailed stops the process and explains why the start failed.
func (b *Backend) startFailed(err error) error {
	// An agent that went away has usually exited already: give its exit a
	// moment to be reaped so the status and stderr tail are complete. The
	// SDK reports the disconnect as the filter ends, a moment before the
	// filter's end is recorded in outputDone: wait for that briefly too.
	select {
	case <-b.outputDone:
		select {
		case <-b.proc.Done():
		case <-time.After(2 * time.Second):
		}
	case <-time.After(startFailedOutputWait):
	}
	ee := b.proc.ExitError()
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.proc.Stop(stopCtx)
	<-b.done
	provider := b.cfg.Spec.Provider
	b.mu.Lock()
	fatal := b.fatal
	b.mu.Unlock()
	if fatal != nil && !errors.Is(err, ErrProtocol) {
		return fmt.Errorf("start agent %q: %w", provider, fatal)
	}
	if ee != nil {
		if errors.Is(err, backends.ErrAuthRequired) {
			return fmt.Errorf("start agent %q: %w: %w", provider, err, ee)
		}
		return fmt.Errorf("start agent %q: %v: %w", provider, err, ee)
	}
	tail := b.proc.Tail()
	if tail != "" {
		return fmt.Errorf("start agent %q: %w; last stderr:\n%s", provider, err, tail)
	}
	return fmt.Errorf("start agent %q: %w", provider, err)
}

func (b *Backend) handshake(ctx context.Context, resume string) (backends.Info, error) {
	spec := b.cfg.Spec
	conn, release, err := b.acquire()
	if err != nil {
		return backends.Info{}, stageErr(ctx, "initialize", err)
	}
	defer release()
	initResp, err := conn.Initialize(ctx, acpsdk.InitializeRequest{
		ProtocolVersion: acpsdk.ProtocolVersionNumber,
		ClientCapabilities: acpsdk.ClientCapabilities{
			Fs:       acpsdk.FileSystemCapabilities{ReadTextFile: b.cfg.FS != nil, WriteTextFile: b.cfg.FS != nil},
			Terminal: b.cfg.Terminals != nil,
		},
		ClientInfo: &acpsdk.Implementation{Name: clientName, Version: ClientVersion},
	})
	if err != nil {
		return backends.Info{}, stageErr(ctx, "initialize", err)
	}
	if initResp.ProtocolVersion != acpsdk.ProtocolVersionNumber {
		return backends.Info{}, fmt.Errorf("%w: agent answered protocol version %d, want %d", ErrProtocol, initResp.ProtocolVersion, acpsdk.ProtocolVersionNumber)
	}
	b.mu.Lock()
	b.info.ProtocolVersion = int(initResp.ProtocolVersion)
	b.info.LoadSession = initResp.AgentCapabilities.LoadSession
	b.info.EmbeddedContext = initResp.AgentCapabilities.PromptCapabilities.EmbeddedContext
	if initResp.AgentInfo != nil {
		b.info.AgentName, b.info.AgentVersion = initResp.AgentInfo.Name, initResp.AgentInfo.Version
	}
	b.info.AuthMethods = authMethodIDs(initResp.AuthMethods)
	b.info.Auth = authMethods(initResp.AuthMethods)
	sc := initResp.AgentCapabilities.SessionCapabilities
	b.info.Sessions = backends.SessionCaps{Resume: sc.Resume != nil, Close: sc.Close != nil, List: sc.List != nil, Fork: sc.Fork != nil}
	forkFrom := b.forkFrom // read under mu
	if b.cfg.NoSession {
		info := b.info
		b.mu.Unlock()
		return info, nil
	}
	b.mu.Unlock()

	given, sharing := spec.MCPServers, []backends.MCPSharing(nil)
	if b.cfg.MCPPlan != nil {
		given, sharing = b.cfg.MCPPlan.Servers(initResp.AgentCapabilities.McpCapabilities.Http)
	}
	mcp, mcpNames, mcpSkipped := mcpServers(given, initResp.AgentCapabilities.McpCapabilities)
	lost := ""
	if resume != "" && sc.Resume != nil {
		// session/resume takes the session up again without replaying its
		// history: no replay window.
		resp, err := conn.ResumeSession(ctx, acpsdk.ResumeSessionRequest{Cwd: spec.Dir, McpServers: mcp, SessionId: acpsdk.SessionId(resume)})
		if err == nil {
			b.mu.Lock()
			b.sessionID = resume
			b.info.AgentSessionID, b.info.Resumed, b.info.ResumedBy = resume, true, resumedByResume
			b.applySessionStateLocked(resp.Modes, resp.ConfigOptions)
			b.mu.Unlock()
			b.setMCP("session/resume", mcpNames, mcpSkipped, sharing)
			return b.Info(), nil
		}
		if ctx.Err() != nil || b.exited() {
			return backends.Info{}, stageErr(ctx, "session/resume", err)
		}
		lost = "session/resume failed: " + refusal(err)
		b.logger.Info("session/resume refused; trying session/load", "resume", resume, "err", err)
	}
	if resume != "" && initResp.AgentCapabilities.LoadSession {
		// The replay window opens here and stays open after the answer,
		// until the first prompt is written (replay.go).
		b.mu.Lock()
		b.sessionID, b.replaying, b.replayLast = resume, true, time.Now()
		b.mu.Unlock()
		resp, err := conn.LoadSession(ctx, acpsdk.LoadSessionRequest{Cwd: spec.Dir, McpServers: mcp, SessionId: acpsdk.SessionId(resume)})
		b.mu.Lock()
		b.replayLast = time.Now()
		if err == nil {
			b.info.AgentSessionID, b.info.Resumed, b.info.ResumedBy = resume, true, resumedByLoad
			b.applySessionStateLocked(resp.Modes, resp.ConfigOptions)
			b.mu.Unlock()
			b.setMCP("session/load", mcpNames, mcpSkipped, sharing)
			return b.Info(), nil
		}
		b.sessionID, b.replaying = "", false
		b.mu.Unlock()
		if ctx.Err() != nil || b.exited() {
			return backends.Info{}, stageErr(ctx, "session/load", err)
		}
		lost = joinLost(lost, "session/load failed: "+refusal(err))
	} else if resume != "" && lost == "" {
		lost = "the agent cannot resume or load sessions (no session/resume or loadSession capability)"
	}
	if forkFrom != "" && sc.Fork != nil {
		if info, ok, err := b.forkSession(ctx, conn, forkFrom, mcp, mcpNames, mcpSkipped, sharing); ok || err != nil {
			return info, err
		}
	}
	resp, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: spec.Dir, McpServers: mcp})
	if err != nil {
		return backends.Info{}, stageErr(ctx, "session/new", err)
	}
	b.mu.Lock()
	b.sessionID = string(resp.SessionId)
	b.info.AgentSessionID = string(resp.SessionId)
	b.applySessionStateLocked(resp.Modes, resp.ConfigOptions)
	if lost != "" {
		b.info.ContextLost = true
	}
	b.mu.Unlock()
	b.setMCP("session/new", mcpNames, mcpSkipped, sharing)
	info := b.Info()
	if lost != "" {
		b.logger.Warn("agent context lost", "resume", resume, "reason", lost)
		b.cfg.OnEvent(backends.NewEvent(backends.EventAgentContextLost, spec.Provider, map[string]string{
			"previous_session_id": resume, "new_session_id": string(resp.SessionId), "reason": lost,
		}))
	}
	return info, nil
}

// How a session was taken up again, in Info.ResumedBy.
const (
	resumedByResume = "resume"
	resumedByLoad   = "load"
	resumedByFork   = "fork"
)

// joinLost joins the reasons a resume failed.
func joinLost(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// CloseSession ends the agent's session with session/close, when the agent
// offers it (see backends.SessionCloser).
func (b *Backend) CloseSession(ctx context.Context) error {
	b.mu.Lock()
	can, sid := b.info.Sessions.Close, b.sessionID
	b.mu.Unlock()
	if !can || sid == "" {
		return fmt.Errorf("session/close: %w", backends.ErrUnsupported)
	}
	conn, release, err := b.acquire()
	if err != nil {
		return fmt.Errorf("session/close: %w", err)
	}
	defer release()
	if _, err := conn.CloseSession(ctx, acpsdk.CloseSessionRequest{SessionId: acpsdk.SessionId(sid)}); err != nil {
		return fmt.Errorf("session/close: %w", err)
	}
	return nil
}

var _ backends.SessionCloser = (*Backend)(nil)

func (b *Backend) applySessionStateLocked(modes *acpsdk.SessionModeState, opts []acpsdk.SessionConfigOption) {
	if modes != nil {
		b.info.Modes = b.info.Modes[:0]
		for _, m := range modes.AvailableModes {
			md := backends.Mode{ID: string(m.Id), Name: m.Name}
			if m.Description != nil {
				md.Description = *m.Description
			}
			b.info.Modes = append(b.info.Modes, md)
		}
		b.info.CurrentMode = string(modes.CurrentModeId)
	}
	if len(opts) > 0 {
		b.info.ConfigOptions = backends.MustJSON(opts)
	}
}

func authMethodIDs(ms []acpsdk.AuthMethod) []string {
	var ids []string
	for _, m := range ms {
		raw, err := json.Marshal(m)
		if err != nil {
			continue
		}
		var v struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(raw, &v) == nil && v.ID != "" {
			ids = append(ids, v.ID)
		}
	}
	return ids
}

func (b *Backend) exited() bool {
	select {
	case <-b.proc.Done():
		return true
	default:
		return false
	}
}

// stageErr names the handshake stage that failed; when the start context
// ended, that is the error (the SDK reports it only as text). An agent
// that answers "Authentication required" gives an error wrapping
// backends.ErrAuthRequired.
func stageErr(ctx context.Context, stage string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", stage, context.Cause(ctx))
	}
	if isAuthRequired(err) {
		return fmt.Errorf("%s: %w", stage, &backends.AuthRequiredError{Refusal: refusal(err)})
	}
	return fmt.Errorf("%s: %w", stage, err)
}

// refusal words an agent's error answer for a person: its message and,
// when the agent gave them, its details ("Resource not found: Session not
// found"); other errors as they are.
func refusal(err error) string {
	var re *acpsdk.RequestError
	if !errors.As(err, &re) {
		return err.Error()
	}
	msg := re.Message
	if d, ok := re.Data.(map[string]any); ok {
		if s, ok := d["details"].(string); ok && s != "" && s != msg {
			msg += ": " + s
		}
	}
	return msg
}
