package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agentpool/agentpool/backends"
)

// ErrNoUsage: the pool keeps no usage (Config.Usage is nil).
var ErrNoUsage = errors.New("usage is not recorded by this pool")

// SessionUsage is what a session used: its tokens and cost in total and
// per agent, and its own budget.
type SessionUsage struct {
	Session string `json:"session"`
	// Turns counts the turns whose agent reported tokens.
	Turns  int64  `json:"turns"`
	Tokens Tokens `json:"tokens"`
	// Cost is one amount per currency, never added across currencies.
	Cost   []Money        `json:"cost"`
	Agents []AgentSummary `json:"agents"`
	// Budget is the session's own budget, nil when it has none.
	Budget *backends.Budget `json:"budget,omitempty"`
}

// AgentSummary is what one agent of a session used.
type AgentSummary struct {
	Agent  string  `json:"agent"`
	Turns  int64   `json:"turns"`
	Tokens Tokens  `json:"tokens"`
	Cost   []Money `json:"cost"`
	// Context is the occupancy its most recent agent session reported.
	Context *Context `json:"context,omitempty"`
	// AgentSessions counts the agent sessions that reported usage (each
	// new agent session starts its cumulative cost again).
	AgentSessions int `json:"agent_sessions"`
}

// ProviderUsage is what one provider used over all sessions, with its
// budget from the provider registry.
type ProviderUsage struct {
	Provider string           `json:"provider"`
	Sessions int              `json:"sessions"`
	Turns    int64            `json:"turns"`
	Tokens   Tokens           `json:"tokens"`
	Cost     []Money          `json:"cost"`
	Budget   *backends.Budget `json:"budget,omitempty"`
}

// UsageReport is the usage of every provider and every session.
type UsageReport struct {
	Providers []ProviderUsage `json:"providers"`
	Sessions  []SessionUsage  `json:"sessions"`
}

// SessionUsage returns what session id used.
func (p *Pool) SessionUsage(ctx context.Context, id string) (SessionUsage, error) {
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return SessionUsage{}, err
	}
	if p.cfg.Usage == nil {
		return SessionUsage{Session: id, Cost: []Money{}, Agents: []AgentSummary{}}, nil
	}
	r, err := p.usageReport(ctx, id)
	if err != nil {
		return SessionUsage{}, err
	}
	if len(r.Sessions) == 0 {
		r.Sessions = []SessionUsage{{Session: id, Cost: []Money{}, Agents: []AgentSummary{}}}
	}
	u := r.Sessions[0]
	b, err := p.sessionBudget(ctx, s)
	if err != nil {
		return SessionUsage{}, fmt.Errorf("usage of session %q: %w", id, err)
	}
	if !b.IsZero() {
		u.Budget = &b
	}
	return u, nil
}

// Usage returns the usage of every provider and every session.
func (p *Pool) Usage(ctx context.Context) (UsageReport, error) {
	if p.cfg.Usage == nil {
		return UsageReport{Providers: []ProviderUsage{}, Sessions: []SessionUsage{}}, nil
	}
	r, err := p.usageReport(ctx, "")
	if err != nil {
		return UsageReport{}, err
	}
	for i := range r.Sessions {
		b, err := p.cfg.Usage.SessionBudget(ctx, r.Sessions[i].Session)
		if err != nil {
			return UsageReport{}, fmt.Errorf("usage: %w", err)
		}
		if !b.IsZero() {
			r.Sessions[i].Budget = &b
		}
	}
	for i := range r.Providers {
		if spec, err := p.cfg.Resolver.Resolve(r.Providers[i].Provider); err == nil && !spec.Budget.IsZero() {
			b := spec.Budget
			r.Providers[i].Budget = &b
		}
	}
	return r, nil
}

// usageReport sums what the store holds, of one session or of all.
func (p *Pool) usageReport(ctx context.Context, session string) (UsageReport, error) {
	sums, err := p.cfg.Usage.SumTurnUsage(ctx, session)
	if err != nil {
		return UsageReport{}, fmt.Errorf("usage: %w", err)
	}
	agents, err := p.cfg.Usage.ListAgentUsage(ctx, session)
	if err != nil {
		return UsageReport{}, fmt.Errorf("usage: %w", err)
	}
	return sumUsage(sums, agents), nil
}

// sumUsage builds the report from the token sums per (session, agent) and
// the agent sessions' reports (oldest update first).
func sumUsage(sums []TokenSum, agents []AgentUsage) UsageReport {
	type pair struct{ session, agent string }
	bySession := map[string]*SessionUsage{}
	byPair := map[pair]*AgentSummary{}
	byProvider := map[string]*ProviderUsage{}
	providerSessions := map[pair]bool{}
	sess := func(id string) *SessionUsage {
		if s := bySession[id]; s != nil {
			return s
		}
		s := &SessionUsage{Session: id, Cost: []Money{}}
		bySession[id] = s
		return s
	}
	agentOf := func(session, agent string) *AgentSummary {
		k := pair{session, agent}
		if a := byPair[k]; a != nil {
			return a
		}
		a := &AgentSummary{Agent: agent, Cost: []Money{}}
		byPair[k] = a
		return a
	}
	prov := func(session, agent string) *ProviderUsage {
		pr := byProvider[agent]
		if pr == nil {
			pr = &ProviderUsage{Provider: agent, Cost: []Money{}}
			byProvider[agent] = pr
		}
		if !providerSessions[pair{session, agent}] {
			providerSessions[pair{session, agent}] = true
			pr.Sessions++
		}
		return pr
	}
	for _, t := range sums {
		s, a, pr := sess(t.Session), agentOf(t.Session, t.Agent), prov(t.Session, t.Agent)
		s.Turns += t.Turns
		s.Tokens.add(t.Tokens)
		a.Turns += t.Turns
		a.Tokens.add(t.Tokens)
		pr.Turns += t.Turns
		pr.Tokens.add(t.Tokens)
	}
	for _, u := range agents {
		s, a, pr := sess(u.Session), agentOf(u.Session, u.Agent), prov(u.Session, u.Agent)
		a.AgentSessions++
		if u.ContextSize > 0 || u.ContextUsed > 0 {
			a.Context = &Context{Used: u.ContextUsed, Size: u.ContextSize} // the latest wins
		}
		if u.Cost != nil {
			s.Cost = addMoney(s.Cost, *u.Cost, u.Currency)
			a.Cost = addMoney(a.Cost, *u.Cost, u.Currency)
			pr.Cost = addMoney(pr.Cost, *u.Cost, u.Currency)
		}
	}
	r := UsageReport{Providers: []ProviderUsage{}, Sessions: []SessionUsage{}}
	for _, id := range slices.Sorted(maps.Keys(bySession)) {
		s := bySession[id]
		s.Agents = []AgentSummary{}
		for k, a := range byPair {
			if k.session == id {
				s.Agents = append(s.Agents, *a)
			}
		}
		slices.SortFunc(s.Agents, func(x, y AgentSummary) int { return strings.Compare(x.Agent, y.Agent) })
		r.Sessions = append(r.Sessions, *s)
	}
	for _, id := range slices.Sorted(maps.Keys(byProvider)) {
		r.Providers = append(r.Providers, *byProvider[id])
	}
	return r
}

// SetBudget sets session id's own budget; a zero Budget removes it. A
// cost limit needs its currency.
func (p *Pool) SetBudget(ctx context.Context, id string, b backends.Budget) error {
	if err := validBudget(b); err != nil {
		return err
	}
	s, err := p.loadSession(ctx, id)
	if err != nil {
		return err
	}
	if p.cfg.Usage == nil {
		return fmt.Errorf("budget of session %q: %w", id, ErrNoUsage)
	}
	if err := p.setSessionBudget(ctx, s, b); err != nil {
		return fmt.Errorf("budget of session %q: %w", id, err)
	}
	p.emit(s, EventBudgetChanged, "", b)
	// A running turn already past the new budget stops now.
	p.stopOverBudget(s, "")
	return nil
}

// validBudget checks the figures of a budget.
func validBudget(b backends.Budget) error {
	switch {
	case b.Tokens < 0:
		return fmt.Errorf("%w: budget tokens %d is negative", ErrInvalid, b.Tokens)
	case b.Cost < 0:
		return fmt.Errorf("%w: budget cost %g is negative", ErrInvalid, b.Cost)
	case b.Cost > 0 && !validCurrency(b.Currency):
		return fmt.Errorf("%w: budget cost needs its currency, a three-letter code such as \"USD\" (got %q)", ErrInvalid, b.Currency)
	}
	return nil
}

// validCurrency reports whether c looks like an ISO 4217 code.
func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for _, r := range c {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

// validCreateBudget checks the budget of a session to create.
func (p *Pool) validCreateBudget(b *backends.Budget) error {
	if b == nil || b.IsZero() {
		return nil
	}
	if p.cfg.Usage == nil {
		return fmt.Errorf("budget: %w", ErrNoUsage)
	}
	return validBudget(*b)
}
