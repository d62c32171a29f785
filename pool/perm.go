package pool

import (
	"context"
	"fmt"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/permission"
)

// permissionFunc routes an agent's permission requests through the broker
// with the provider's policy.
func (p *Pool) permissionFunc(s *session, agent string, spec backends.Spec) backends.PermissionFunc {
	policy, err := permission.PolicyFrom(spec.Permissions, spec.Mode)
	if err != nil {
		p.logger.Warn("provider permission policy invalid; using defaults", "agent", agent, "err", err)
		policy = permission.Policy{}
	}
	return func(ctx context.Context, req backends.PermissionRequest) (backends.PermissionOutcome, error) {
		opts := make([]permission.Option, 0, len(req.Options))
		for _, o := range req.Options {
			opts = append(opts, permission.Option{ID: o.ID, Name: o.Name, Kind: o.Kind})
		}
		out, err := p.broker.Request(ctx, permission.Request{
			Session: s.id, Agent: agent, Turn: req.Turn, ToolCallID: req.ToolCallID, Title: req.Title,
			ToolKind: req.Kind, Action: permission.Action(req.Action), Locations: req.Locations, RawInput: req.RawInput, Options: opts, Policy: policy,
		})
		return backends.PermissionOutcome{Cancelled: out.Cancelled, OptionID: out.OptionID}, err
	}
}

func (p *Pool) sessionIfLoaded(id string) *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions[id]
}

func (p *Pool) onPermissionRequested(pd permission.Pending) {
	p.permWaits.Add(1)
	s := p.sessionIfLoaded(pd.Request.Session)
	if s == nil {
		return
	}
	r := pd.Request
	p.publish(s, backends.Event{Type: backends.EventPermissionRequest, Agent: r.Agent, Turn: r.Turn, Data: backends.MustJSON(map[string]any{
		"request": pd.ID, "tool_call_id": r.ToolCallID, "title": r.Title, "kind": r.ToolKind, "action": r.Action,
		"locations": r.Locations, "raw_input": r.RawInput, "options": r.Options, "risk": pd.Risk, "deadline": pd.Deadline,
	})})
}

func (p *Pool) onPermissionResolved(r permission.Record) {
	if r.DecidedBy == permission.DecidedByUser || r.DecidedBy == permission.DecidedByTimeout {
		p.histMu.Lock()
		p.permHist.observe(r.DecidedAt.Sub(r.RequestedAt).Seconds())
		p.histMu.Unlock()
	}
	if err := p.cfg.Store.InsertPermission(context.WithoutCancel(p.ctx), r); err != nil {
		p.logger.Warn("store permission decision", "session", r.Session, "request", r.ID, "err", err)
	}
	// An "always" answer is kept with the session before the agent hears
	// it, so that a restart, a move or a takeover does not ask again.
	if _, ok := r.Remembered(); ok {
		if err := p.cfg.Store.RememberPermission(context.WithoutCancel(p.ctx), r); err != nil {
			p.logger.Warn("store remembered permission answer", "session", r.Session, "request", r.ID, "err", err)
		}
	}
	s := p.sessionIfLoaded(r.Session)
	if s == nil {
		return
	}
	p.publish(s, backends.Event{Type: backends.EventPermissionResolved, Agent: r.Agent, Turn: r.Turn, Data: backends.MustJSON(map[string]any{
		"request": r.ID, "decision": r.Decision, "decided_by": r.DecidedBy, "option_kind": r.OptionKind,
		"option_id": r.OptionID, "cancelled": r.Cancelled, "note": r.Note, "action": r.Action, "risk": r.Risk,
		// What was asked, for a decision made without asking (policy,
		// remembered), which has no permission.requested event.
		"title": r.Request.Title, "kind": r.Request.ToolKind,
	})})
}

// Answer answers a pending permission request by option kind (or id, or
// "allow"/"deny"). Errors wrap permission.ErrUnknownRequest or
// permission.ErrInvalidChoice.
func (p *Pool) Answer(session, request, choice string) error {
	return p.broker.Answer(session, request, choice)
}

// Pending lists the session's pending permission requests.
func (p *Pool) Pending(session string) []permission.Pending {
	return p.broker.Pending(session)
}

// Remembered returns the answers session id remembers: each agent's
// "always" answer by kind of action (see permission.Remembered), as stored
// with the session. A closed session remembers none.
func (p *Pool) Remembered(ctx context.Context, id string) ([]permission.Remembered, error) {
	if _, err := p.loadSession(ctx, id); err != nil {
		return nil, err
	}
	rs, err := p.cfg.Store.RememberedPermissions(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("session %q remembered permissions: %w", id, err)
	}
	return rs, nil
}

// ForgetRemembered takes back every answer session id remembers, from the
// store and from the broker: the next request of each kind is asked again.
// It returns how many answers there were.
func (p *Pool) ForgetRemembered(ctx context.Context, id string) (int, error) {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return 0, err
	}
	if _, _, closed, _, _ := s.state(); closed {
		return 0, nil
	}
	rs, err := p.cfg.Store.RememberedPermissions(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("session %q remembered permissions: %w", id, err)
	}
	if err := p.cfg.Store.ForgetPermissions(ctx, id); err != nil {
		return 0, fmt.Errorf("session %q: forget remembered permissions: %w", id, err)
	}
	p.broker.Forget(id)
	p.logger.Info("remembered permission answers taken back", "session", id, "answers", len(rs))
	return len(rs), nil
}
