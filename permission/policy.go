package permission

import (
	"errors"
	"fmt"
	"slices"
)

// Provider permission modes accepted by PolicyFrom.
const (
	// ModeDefault applies the rules and then the defaults; "" means the same.
	ModeDefault = "default"
	// ModeFull allows every action that has no explicit rule.
	ModeFull = "full"
)

// Policy is one provider's permission rules.
//
// The zero Policy applies the defaults: low-risk actions and bridge
// operations are allowed, everything else is asked.
type Policy struct {
	// Rules decide single actions; they win over Full and the defaults.
	Rules map[Action]Decision `json:"rules,omitempty"`
	// Full is the provider mode "full": allow every action without a rule.
	Full bool `json:"full,omitempty"`
}

// PolicyFrom builds a Policy from the registry's plain map of action to
// decision and its mode string. Every bad key, value or mode is reported, each
// error naming it, joined in key order.
func PolicyFrom(rules map[string]string, mode string) (Policy, error) {
	var p Policy
	var errs []error
	switch mode {
	case "", ModeDefault:
	case ModeFull:
		p.Full = true
	default:
		errs = append(errs, fmt.Errorf("mode: %w %q (want %q or %q)", ErrUnknownMode, mode, ModeDefault, ModeFull))
	}
	keys := make([]string, 0, len(rules))
	for k := range rules {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		a, err := ParseAction(k)
		if err != nil {
			errs = append(errs, fmt.Errorf("permissions[%q]: %w", k, err))
			continue
		}
		d, err := ParseDecision(rules[k])
		if err != nil {
			errs = append(errs, fmt.Errorf("permissions[%q]: %w", k, err))
			continue
		}
		if p.Rules == nil {
			p.Rules = make(map[Action]Decision, len(rules))
		}
		p.Rules[a] = d
	}
	if len(errs) > 0 {
		return Policy{}, errors.Join(errs...)
	}
	return p, nil
}

// Decide returns what p says about a: its explicit rule if it has one (a rule
// holding anything but allow, ask or deny counts as ask), else allow in full
// mode, else DefaultDecision(a). ActionUnknown gets the strictest decision
// (deny, then ask, then allow) that p gives any ACP tool kind: a request
// whose kind is unknown may be anything, a shell command included.
func (p Policy) Decide(a Action) Decision {
	if a == ActionUnknown {
		return p.strictest()
	}
	if d, ok := p.Rules[a]; ok {
		switch d {
		case DecisionAllow, DecisionDeny:
			return d
		}
		return DecisionAsk
	}
	if p.Full {
		return DecisionAllow
	}
	return DefaultDecision(a)
}

// strictest returns the strictest decision p gives any ACP tool kind.
func (p Policy) strictest() Decision {
	rank := map[Decision]int{DecisionAllow: 0, DecisionAsk: 1, DecisionDeny: 2}
	worst := DecisionAllow
	for _, k := range toolKinds {
		if d := p.Decide(k); rank[d] > rank[worst] {
			worst = d
		}
	}
	return worst
}

// DefaultDecision is the decision for a when a provider sets no rule for it:
// allow for bridge operations (the guard has passed them and the agent already
// asked at tool level) and for low-risk actions, ask for everything else.
func DefaultDecision(a Action) Decision {
	if a.IsBridge() || RiskOf(a) == RiskLow {
		return DecisionAllow
	}
	return DecisionAsk
}
