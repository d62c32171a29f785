package acp

import (
	"context"
	"encoding/json"
	"fmt"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/backends"
)

var _ backends.ForkStarter = (*Backend)(nil)

// StartFork is Start for a session that continues another's
// conversation: an agent that offers session/fork (unstable in ACP) is
// asked to fork its session from in the worktree of this one; one that
// does not, or refuses, gets session/new, and Info says which it was
// (ResumedBy "fork", ForkedFrom). The process is this backend's own, in
// its own worktree and confinement: the session forked is never touched.
func (b *Backend) StartFork(ctx context.Context, from string) (backends.Info, error) {
	b.mu.Lock()
	b.forkFrom = from
	b.mu.Unlock()
	return b.Start(ctx, "")
}

// forkSession sends session/fork of from. ok is false when the agent
// refused it: the caller starts a new session instead. err is set only
// when the start itself failed (ctx ended, the agent went away).
func (b *Backend) forkSession(ctx context.Context, conn *acpsdk.ClientSideConnection, from string, mcp []acpsdk.McpServer, mcpNames []string, mcpSkipped []backends.MCPSkipped, sharing []backends.MCPSharing) (backends.Info, bool, error) {
	servers, err := convertJSON[[]acpsdk.UnstableMcpServer](mcp)
	if err != nil {
		b.logger.Warn("session/fork: MCP servers not expressible; starting a new session", "err", err)
		return backends.Info{}, false, nil
	}
	resp, err := conn.UnstableForkSession(ctx, acpsdk.UnstableForkSessionRequest{Cwd: b.cfg.Spec.Dir, McpServers: servers, SessionId: acpsdk.SessionId(from)})
	if err != nil {
		if ctx.Err() != nil || b.exited() {
			return backends.Info{}, false, stageErr(ctx, "session/fork", err)
		}
		b.logger.Info("session/fork refused; starting a new session", "from", from, "err", err)
		return backends.Info{}, false, nil
	}
	opts, err := convertJSON[[]acpsdk.SessionConfigOption](resp.ConfigOptions)
	if err != nil {
		b.logger.Warn("session/fork: config options not understood", "err", err)
		opts = nil
	}
	b.mu.Lock()
	b.sessionID = string(resp.SessionId)
	b.info.AgentSessionID, b.info.Resumed, b.info.ResumedBy, b.info.ForkedFrom = string(resp.SessionId), true, resumedByFork, from
	b.applySessionStateLocked(resp.Modes, opts)
	b.mu.Unlock()
	b.setMCP("session/fork", mcpNames, mcpSkipped, sharing)
	return b.Info(), true, nil
}

// convertJSON converts v to T through its JSON form (the SDK's stable
// and unstable types of one shape).
func convertJSON[T any](v any) (T, error) {
	var out T
	raw, err := json.Marshal(v)
	if err != nil {
		return out, fmt.Errorf("encode: %w", err)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("decode: %w", err)
	}
	return out, nil
}
