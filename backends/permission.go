package backends

import (
	"context"
	"encoding/json"
)

// PermissionOption is one choice the agent offers.
type PermissionOption struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Kind string `json:"kind"`
}

// PermissionRequest is session/request_permission, decoded, or a request of
// the agent to the fs and terminal bridge that its policy says to check
// (then Action is set).
type PermissionRequest struct {
	Turn       int64  `json:"turn,omitempty"`
	ToolCallID string `json:"tool_call_id"`
	Title      string `json:"title,omitempty"`
	// Kind is the ACP tool kind: the request's own, else the last one the
	// agent announced for the tool call; "" when neither is known.
	Kind string `json:"kind,omitempty"`
	// Action is set by the backend, never from the agent's words, for a
	// bridge operation: one of the BridgeFSRead, BridgeFSWrite or
	// BridgeTerminal actions. The PermissionFunc must decide it by that
	// action's rule (permission.Action(Action)), not by Kind.
	Action    string             `json:"action,omitempty"`
	Locations []string           `json:"locations,omitempty"`
	RawInput  json.RawMessage    `json:"raw_input,omitempty"`
	Options   []PermissionOption `json:"options"`
}

// Bridge actions, as in PermissionRequest.Action: the names of the
// permission rules of the fs and terminal bridge.
const (
	BridgeFSRead   = "fs.read"
	BridgeFSWrite  = "fs.write"
	BridgeTerminal = "terminal"
)

// BridgePermissionOptions are the options of a bridge PermissionRequest,
// which the agent did not offer: allow once, allow always, reject once. Their
// ids are their kinds.
func BridgePermissionOptions() []PermissionOption {
	return []PermissionOption{
		{ID: "allow_once", Name: "Allow once", Kind: "allow_once"},
		{ID: "allow_always", Name: "Allow always", Kind: "allow_always"},
		{ID: "reject_once", Name: "Reject", Kind: "reject_once"},
	}
}

// PermissionOutcome is the answer: a selected option id, or cancelled.
type PermissionOutcome struct {
	Cancelled bool
	OptionID  string
}

// PermissionFunc decides a permission request. It may block while a person
// decides; its ctx is cancelled when the turn is cancelled or the agent ends,
// and it must then return promptly (a cancelled outcome).
type PermissionFunc func(ctx context.Context, req PermissionRequest) (PermissionOutcome, error)
