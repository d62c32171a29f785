package permission

import (
	"errors"
	"fmt"
	"strings"
)

// Action is what an agent wants to do: an ACP tool kind, or an operation of
// agentpool's own fs and terminal bridge.
type Action string

// ACP tool kinds.
const (
	ActionRead       Action = "read"
	ActionEdit       Action = "edit"
	ActionDelete     Action = "delete"
	ActionMove       Action = "move"
	ActionSearch     Action = "search"
	ActionExecute    Action = "execute"
	ActionThink      Action = "think"
	ActionFetch      Action = "fetch"
	ActionSwitchMode Action = "switch_mode"
	ActionOther      Action = "other"
)

// Bridge operations: requests the agent sends to agentpool itself after the
// worktree guard has accepted them.
const (
	ActionFSRead   Action = "fs.read"
	ActionFSWrite  Action = "fs.write"
	ActionTerminal Action = "terminal"
)

// ActionUnknown is the action of a request whose tool kind is missing or not
// an ACP tool kind, after every announcement of its tool call was taken into
// account. It cannot be named in a policy: Policy.Decide gives it the
// strictest decision the policy gives any tool kind, so a missing kind never
// falls to a weaker rule (such as "other": "allow" while "execute": "deny").
const ActionUnknown Action = "unknown"

// Risk grades an Action.
type Risk string

// Risk levels.
const (
	RiskLow    Risk = "low"
	RiskMedium Risk = "medium"
	RiskHigh   Risk = "high"
)

// Decision is what a Policy says about an Action, or what was decided about a
// request (then only allow or deny).
type Decision string

// Decisions.
const (
	DecisionAllow Decision = "allow"
	DecisionAsk   Decision = "ask"
	DecisionDeny  Decision = "deny"
)

// Errors returned by ParseAction, ParseDecision and PolicyFrom.
var (
	// ErrUnknownAction is returned for a string that names no Action.
	ErrUnknownAction = errors.New("unknown permission action")
	// ErrUnknownDecision is returned for a string other than allow, ask or deny.
	ErrUnknownDecision = errors.New("unknown permission decision")
	// ErrUnknownMode is returned by PolicyFrom for a mode other than "",
	// "default" or "full".
	ErrUnknownMode = errors.New("unknown permission mode")
)

// Actions returns every known Action: the ACP tool kinds, then the bridge
// operations.
func Actions() []Action {
	return []Action{
		ActionRead, ActionEdit, ActionDelete, ActionMove, ActionSearch,
		ActionExecute, ActionThink, ActionFetch, ActionSwitchMode, ActionOther,
		ActionFSRead, ActionFSWrite, ActionTerminal,
	}
}

// ActionFromToolKind maps an ACP tool kind to its Action. An empty or unknown
// kind, including the name of a bridge operation (which an agent must not be
// able to claim), is ActionUnknown.
func ActionFromToolKind(kind string) Action {
	if a := Action(kind); a.isToolKind() {
		return a
	}
	return ActionUnknown
}

// toolKinds are the Actions that are ACP tool kinds.
var toolKinds = [...]Action{
	ActionRead, ActionEdit, ActionDelete, ActionMove, ActionSearch,
	ActionExecute, ActionThink, ActionFetch, ActionSwitchMode, ActionOther,
}

// isToolKind reports whether a is an ACP tool kind.
func (a Action) isToolKind() bool {
	for _, k := range toolKinds {
		if a == k {
			return true
		}
	}
	return false
}

// IsBridge reports whether a is an operation of the fs and terminal bridge.
func (a Action) IsBridge() bool {
	return a == ActionFSRead || a == ActionFSWrite || a == ActionTerminal
}

// RiskOf grades a: low for read, search, think and fs.read; medium for edit,
// move, fetch, switch_mode and fs.write; high for delete, execute, terminal,
// other, ActionUnknown and anything else.
func RiskOf(a Action) Risk {
	switch a {
	case ActionRead, ActionSearch, ActionThink, ActionFSRead:
		return RiskLow
	case ActionEdit, ActionMove, ActionFetch, ActionSwitchMode, ActionFSWrite:
		return RiskMedium
	}
	return RiskHigh
}

// ParseAction returns the Action named s exactly, or an error wrapping
// ErrUnknownAction that lists the valid names.
func ParseAction(s string) (Action, error) {
	for _, a := range Actions() {
		if string(a) == s {
			return a, nil
		}
	}
	names := make([]string, 0, 13)
	for _, a := range Actions() {
		names = append(names, string(a))
	}
	return "", fmt.Errorf("%w %q (want one of %s)", ErrUnknownAction, s, strings.Join(names, ", "))
}

// ParseDecision returns the Decision named s exactly (allow, ask or deny), or
// an error wrapping ErrUnknownDecision.
func ParseDecision(s string) (Decision, error) {
	switch d := Decision(s); d {
	case DecisionAllow, DecisionAsk, DecisionDeny:
		return d, nil
	}
	return "", fmt.Errorf("%w %q (want allow, ask or deny)", ErrUnknownDecision, s)
}
