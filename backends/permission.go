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

// PermissionRequest is session/request_permission, decoded.
type PermissionRequest struct {
	Turn       int64              `json:"turn,omitempty"`
	ToolCallID string             `json:"tool_call_id"`
	Title      string             `json:"title,omitempty"`
	Kind       string             `json:"kind,omitempty"`
	Locations  []string           `json:"locations,omitempty"`
	RawInput   json.RawMessage    `json:"raw_input,omitempty"`
	Options    []PermissionOption `json:"options"`
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
