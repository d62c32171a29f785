package acp

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
)

// CodePermissionDenied is the JSON-RPC error code of an fs/* or
// terminal/create request that the provider's permission rules, or the
// person they asked, refused. ACP defines no such code; JSON-RPC leaves
// -32000 to -32099 to implementations, and ACP uses -32000 and -32002.
const CodePermissionDenied = -32001

// withBridgeCheck returns ctx with the backend's check of bridge operations
// (authorizeBridge), which acpfs runs after its guard.
func (b *Backend) withBridgeCheck(ctx context.Context) context.Context {
	return acpfs.WithAuthorizer(ctx, b.authorizeBridge)
}

// authorizeBridge applies the provider's rule for a bridge operation the
// guard accepted. With no rule for its action (fs.read, fs.write, terminal)
// the operation goes ahead: that is the policy's default for bridge
// operations in every mode (permission.DefaultDecision), and it keeps the
// permission audit free of one record per file read. With a rule, the
// operation goes through the PermissionFunc like a session/request_permission,
// with Action set: the policy allows or denies it, or a person is asked, and
// the decision is audited as every other permission decision. A refusal, a
// cancelled turn or a failed request wrap acpfs.ErrPermissionDenied.
func (b *Backend) authorizeBridge(ctx context.Context, a acpfs.Access) error {
	action := bridgeAction(a.Op)
	rule, ok := b.cfg.Spec.Permissions[action]
	if !ok {
		return nil
	}
	req := PermissionRequest{Action: action, Title: bridgeTitle(a), Options: backends.BridgePermissionOptions()}
	if a.Path != "" {
		req.Locations = []string{a.Path}
	}
	raw := map[string]any{"path": a.Path}
	if a.Op == acpfs.OpTerminal {
		raw = map[string]any{"cwd": a.Path, "command": a.Command, "args": a.Args}
	} else if a.Op == acpfs.OpWrite {
		raw["bytes"] = a.Bytes
	}
	req.RawInput = backends.MustJSON(raw)
	b.mu.Lock()
	permCtx := b.permCtx
	if b.turn != nil {
		req.Turn = b.turn.id
	}
	b.mu.Unlock()

	if b.cfg.Permissions == nil {
		if rule == "allow" {
			return nil
		}
		b.cfg.OnEvent(backends.NewEvent(backends.EventPermissionResolved, b.cfg.Spec.Provider, map[string]any{
			"action": action, "title": req.Title, "decided_by": "no_handler", "decision": "deny",
			"reason": fmt.Sprintf("rule %q and no permission handler is configured: refused", rule),
		}))
		return fmt.Errorf("%s: %w (rule %q, no permission handler)", action, acpfs.ErrPermissionDenied, rule)
	}
	// As RequestPermission: the request ends with the turn or the agent.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	unhook := context.AfterFunc(permCtx, stop)
	defer unhook()
	out, err := b.cfg.Permissions(ctx, req)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w: %v", action, acpfs.ErrPermissionDenied, err)
	case ctx.Err() != nil || out.Cancelled:
		return fmt.Errorf("%s: %w: the permission request was cancelled", action, acpfs.ErrPermissionDenied)
	}
	kind := ""
	for _, o := range req.Options {
		if o.ID == out.OptionID {
			kind = o.Kind
		}
	}
	if !strings.HasPrefix(kind, "allow_") {
		return fmt.Errorf("%s: %w", action, acpfs.ErrPermissionDenied)
	}
	return nil
}

// bridgeAction is the permission action of an acpfs operation.
func bridgeAction(op string) string {
	switch op {
	case acpfs.OpRead:
		return backends.BridgeFSRead
	case acpfs.OpWrite:
		return backends.BridgeFSWrite
	}
	return backends.BridgeTerminal
}

// bridgeTitle describes a bridge operation to the person asked.
func bridgeTitle(a acpfs.Access) string {
	switch a.Op {
	case acpfs.OpRead:
		return "Read " + a.Rel
	case acpfs.OpWrite:
		return fmt.Sprintf("Write %s (%d bytes)", a.Rel, a.Bytes)
	}
	cmd := strings.Join(append([]string{a.Command}, a.Args...), " ")
	return fmt.Sprintf("Run %q in %s", cmd, a.Rel)
}
