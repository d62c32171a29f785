package permission

import (
	"encoding/json"
	"time"
)

// ACP permission option kinds.
const (
	KindAllowOnce    = "allow_once"
	KindAllowAlways  = "allow_always"
	KindRejectOnce   = "reject_once"
	KindRejectAlways = "reject_always"
)

// Who or what decided a request, the values of Outcome.DecidedBy.
const (
	DecidedByPolicy     = "policy"
	DecidedByUser       = "user"
	DecidedByTimeout    = "timeout"
	DecidedByCancel     = "cancel"
	DecidedByRemembered = "remembered"
)

// Option is one answer the agent offers.
type Option struct {
	// ID is the agent's own id, sent back when the option is selected.
	ID string `json:"id"`
	// Name is the label the agent gives it.
	Name string `json:"name,omitempty"`
	// Kind is allow_once, allow_always, reject_once or reject_always.
	Kind string `json:"kind"`
}

// Request is one permission request of an agent.
type Request struct {
	// Session is the agentpool session id; Agent the provider id.
	Session string `json:"session"`
	Agent   string `json:"agent"`
	// Turn is the number of the turn in its session, 0 outside a turn.
	Turn int64 `json:"turn,omitempty"`
	// ToolCallID, Title, ToolKind, Locations and RawInput describe the tool
	// call, copied from the request's own params.
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Title      string          `json:"title,omitempty"`
	ToolKind   string          `json:"tool_kind,omitempty"`
	Locations  []string        `json:"locations,omitempty"`
	RawInput   json.RawMessage `json:"raw_input,omitempty"`
	// Options are the answers the agent offers.
	Options []Option `json:"options"`
	// Action is derived from ToolKind when empty.
	Action Action `json:"action"`
	// Policy is the provider's policy in force for this request.
	Policy Policy `json:"-"`
}

// Outcome is the answer to give the agent.
type Outcome struct {
	// RequestID is the broker's id of the request.
	RequestID string `json:"request_id"`
	// Cancelled means: answer the agent with outcome "cancelled".
	Cancelled bool `json:"cancelled,omitempty"`
	// OptionID and OptionKind name the selected option when not Cancelled.
	OptionID   string `json:"option_id,omitempty"`
	OptionKind string `json:"option_kind,omitempty"`
	// Decision is allow or deny; a Cancelled outcome is always deny.
	Decision Decision `json:"decision"`
	// DecidedBy is policy, user, timeout, cancel or remembered.
	DecidedBy string `json:"decided_by"`
	// Note explains an unusual outcome, such as a missing option kind.
	Note string `json:"note,omitempty"`
}

// Pending is a request that waits for a person's answer.
type Pending struct {
	ID          string    `json:"id"`
	Request     Request   `json:"request"`
	Risk        Risk      `json:"risk"`
	RequestedAt time.Time `json:"requested_at"`
	// Deadline is when the request is rejected without an answer.
	Deadline time.Time `json:"deadline"`
}

// Record is the audit record of one resolved request.
type Record struct {
	ID          string    `json:"id"`
	Session     string    `json:"session"`
	Agent       string    `json:"agent"`
	Turn        int64     `json:"turn,omitempty"`
	Action      Action    `json:"action"`
	Risk        Risk      `json:"risk"`
	Request     Request   `json:"request"`
	Decision    Decision  `json:"decision"`
	DecidedBy   string    `json:"decided_by"`
	OptionKind  string    `json:"option_kind,omitempty"`
	OptionID    string    `json:"option_id,omitempty"`
	Cancelled   bool      `json:"cancelled,omitempty"`
	Note        string    `json:"note,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
	DecidedAt   time.Time `json:"decided_at"`
}

// BridgeOptions returns the options to put in a Request for a bridge
// operation, which carries none of its own: allow once, allow always and
// reject once.
func BridgeOptions() []Option {
	return []Option{
		{ID: KindAllowOnce, Name: "Allow once", Kind: KindAllowOnce},
		{ID: KindAllowAlways, Name: "Allow always", Kind: KindAllowAlways},
		{ID: KindRejectOnce, Name: "Reject", Kind: KindRejectOnce},
	}
}

// pick returns the first option of the first kind in kinds that opts offers.
func pick(opts []Option, kinds ...string) (Option, bool) {
	for _, k := range kinds {
		for _, o := range opts {
			if o.Kind == k {
				return o, true
			}
		}
	}
	return Option{}, false
}

// decisionOfKind maps an option kind to allow or deny; ok is false for a kind
// that is neither.
func decisionOfKind(kind string) (d Decision, ok bool) {
	switch kind {
	case KindAllowOnce, KindAllowAlways:
		return DecisionAllow, true
	case KindRejectOnce, KindRejectAlways:
		return DecisionDeny, true
	}
	return "", false
}

// kindsFor returns the option kinds that carry d, preferred first.
func kindsFor(d Decision) []string {
	if d == DecisionAllow {
		return []string{KindAllowOnce, KindAllowAlways}
	}
	return []string{KindRejectOnce, KindRejectAlways}
}
