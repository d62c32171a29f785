package permission

import (
	"fmt"
	"strings"
)

// Answer resolves the pending request requestID of session with a person's
// choice: an option kind (preferred: allow_once, allow_always, reject_once,
// reject_always), a plain "allow" or "deny" ("reject" is the same as "deny"),
// or the id of one of the request's options. An allow_always or
// reject_always choice is remembered for the request's (session, agent,
// action) until Forget or Remember, except for ActionUnknown, and forwarded
// to the agent.
//
// It returns an error wrapping ErrUnknownRequest when no such request is
// pending in session, or ErrInvalidChoice when choice selects no offered
// option; the request then stays pending.
func (b *Broker) Answer(session, requestID, choice string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	w, ok := b.pending[requestID]
	if !ok || w.p.Request.Session != session {
		return fmt.Errorf("answer request %q of session %q: %w", requestID, session, ErrUnknownRequest)
	}
	o, err := chooseAnswer(w.p.Request.Options, choice)
	if err != nil {
		return fmt.Errorf("answer request %q: %w", requestID, err)
	}
	d, _ := decisionOfKind(o.Kind)
	b.resolveLocked(w, resolution{option: o, decision: d, by: DecidedByUser})
	if remembers(o.Kind, w.p.Request.Action) {
		b.rememberLocked(session, Remembered{Agent: w.p.Request.Agent, Action: w.p.Request.Action, Kind: o.Kind})
	}
	return nil
}

// chooseAnswer returns the option that choice selects among opts.
func chooseAnswer(opts []Option, choice string) (Option, error) {
	var kinds []string
	switch choice {
	case KindAllowOnce, KindAllowAlways, KindRejectOnce, KindRejectAlways:
		kinds = []string{choice}
	case string(DecisionAllow):
		kinds = kindsFor(DecisionAllow)
	case string(DecisionDeny), "reject":
		kinds = kindsFor(DecisionDeny)
	}
	if kinds != nil {
		if o, ok := pick(opts, kinds...); ok {
			return o, nil
		}
		return Option{}, fmt.Errorf("%w: %q, but the agent offers no %s option (offered: %s)",
			ErrInvalidChoice, choice, strings.Join(kinds, " or "), offered(opts))
	}
	for _, o := range opts {
		if o.ID != choice {
			continue
		}
		if _, ok := decisionOfKind(o.Kind); !ok {
			return Option{}, fmt.Errorf("%w: option %q has unknown kind %q", ErrInvalidChoice, o.ID, o.Kind)
		}
		return o, nil
	}
	return Option{}, fmt.Errorf("%w: %q is no option kind, allow, deny or offered option id (offered: %s)",
		ErrInvalidChoice, choice, offered(opts))
}

// offered lists opts as "id (kind)" for error messages.
func offered(opts []Option) string {
	if len(opts) == 0 {
		return "none"
	}
	s := make([]string, len(opts))
	for i, o := range opts {
		s[i] = fmt.Sprintf("%q (%s)", o.ID, o.Kind)
	}
	return strings.Join(s, ", ")
}
