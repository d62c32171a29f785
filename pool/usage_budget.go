package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/agentpool/agentpool/backends"
)

// ErrBudgetExceeded is wrapped by the *BudgetError that refuses a prompt
// of a session, or of a provider, whose budget is used up.
var ErrBudgetExceeded = errors.New("budget exceeded")

// Budget scopes and kinds of BudgetExceeded.
const (
	BudgetSession  = "session"
	BudgetProvider = "provider"
	BudgetTokens   = "tokens"
	BudgetCost     = "cost"
)

// BudgetExceeded says which budget is used up and by how much: the data
// of a budget.exceeded event, of a turn.ended's "budget_exceeded", and of
// the error that refuses a prompt.
type BudgetExceeded struct {
	// Scope is BudgetSession or BudgetProvider.
	Scope   string `json:"scope"`
	Session string `json:"session"`
	// Provider is the agent of the session or provider budget.
	Provider string `json:"provider"`
	// Kind is BudgetTokens or BudgetCost.
	Kind  string  `json:"kind"`
	Limit float64 `json:"limit"`
	Used  float64 `json:"used"`
	// Currency is the cost budget's currency.
	Currency string `json:"currency,omitempty"`
	// Turn is the turn that crossed it (0 for a refused prompt).
	Turn int64 `json:"turn,omitempty"`
	// Cancelled: the running turn was cancelled because of it.
	Cancelled bool `json:"cancelled,omitempty"`
	// Message says it in a sentence, with how to raise the budget.
	Message string `json:"message"`
}

// BudgetError refuses a prompt past a budget; errors.Is(err,
// ErrBudgetExceeded) holds.
type BudgetError struct{ BudgetExceeded }

// Error returns the sentence for people.
func (e *BudgetError) Error() string { return e.Message }

// Unwrap returns ErrBudgetExceeded.
func (e *BudgetError) Unwrap() error { return ErrBudgetExceeded }

// UserMessage returns the sentence for people.
func (e *BudgetError) UserMessage() string { return e.Message }

// describe fills b.Message.
func (b *BudgetExceeded) describe() {
	fig := func(v float64) string {
		if b.Kind == BudgetTokens {
			return strconv.FormatInt(int64(v), 10) + " tokens"
		}
		return strconv.FormatFloat(v, 'f', -1, 64) + " " + b.Currency
	}
	used := fmt.Sprintf("%s used of %s", fig(b.Used), fig(b.Limit))
	if b.Scope == BudgetProvider {
		b.Message = fmt.Sprintf("provider %q budget exceeded: %s over all its sessions; raise or remove \"budget\" of %q in providers.json",
			b.Provider, used, b.Provider)
		return
	}
	flag := "--tokens N"
	if b.Kind == BudgetCost {
		flag = "--cost X --currency " + b.Currency
	}
	b.Message = fmt.Sprintf("session budget exceeded: %s; raise it with: agentpool session budget %s %s (or PUT /v1/sessions/%s/budget)",
		used, b.Session, flag, b.Session)
}

// overBudget returns the first of the session's budget and the provider's
// (pb, from the registry) that is used up, nil when none is. Cost counts
// only what the agents report in the budget's currency.
func (p *Pool) overBudget(ctx context.Context, s *session, provider string, pb backends.Budget) (*BudgetExceeded, error) {
	if p.cfg.Usage == nil {
		return nil, nil
	}
	session := s.id
	sb, err := p.sessionBudget(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("budget of session %q: %w", session, err)
	}
	check := func(scope string, b backends.Budget, tokens int64, cost []Money) *BudgetExceeded {
		over := &BudgetExceeded{Scope: scope, Session: session, Provider: provider}
		switch {
		case b.Tokens > 0 && tokens >= b.Tokens:
			over.Kind, over.Limit, over.Used = BudgetTokens, float64(b.Tokens), float64(tokens)
		case b.Cost > 0 && amountIn(cost, b.Currency) >= b.Cost:
			over.Kind, over.Limit, over.Used, over.Currency = BudgetCost, b.Cost, amountIn(cost, b.Currency), b.Currency
		default:
			return nil
		}
		over.describe()
		return over
	}
	if !sb.IsZero() {
		r, err := p.usageReport(ctx, session)
		if err != nil {
			return nil, err
		}
		if len(r.Sessions) > 0 {
			if over := check(BudgetSession, sb, r.Sessions[0].Tokens.Total, r.Sessions[0].Cost); over != nil {
				return over, nil
			}
		}
	}
	if !pb.IsZero() {
		r, err := p.usageReport(ctx, "")
		if err != nil {
			return nil, err
		}
		for _, pr := range r.Providers {
			if pr.Provider == provider {
				if over := check(BudgetProvider, pb, pr.Tokens.Total, pr.Cost); over != nil {
					return over, nil
				}
			}
		}
	}
	return nil, nil
}

// refuseOverBudget returns the *BudgetError that refuses a prompt of
// agent in session when a budget is used up.
func (p *Pool) refuseOverBudget(ctx context.Context, s *session, agent string, pb backends.Budget) error {
	over, err := p.overBudget(ctx, s, agent, pb)
	if err != nil {
		return err
	}
	if over != nil {
		return &BudgetError{*over}
	}
	return nil
}

// sessionBudget returns the session's own budget. It is read from the
// store once and kept with the session, which this host alone changes
// while it holds it (see setSessionBudget): a prompt costs no read.
func (p *Pool) sessionBudget(ctx context.Context, s *session) (backends.Budget, error) {
	return s.budget.get(&s.mu, func() (backends.Budget, error) { return p.cfg.Usage.SessionBudget(ctx, s.id) })
}

// setSessionBudget stores b as the budget of s. What sessionBudget kept
// is forgotten before and after the write, so that a read made meanwhile
// is not kept: the next check reads what was stored.
func (p *Pool) setSessionBudget(ctx context.Context, s *session, b backends.Budget) error {
	forget := func() {
		s.mu.Lock()
		s.budget.forget()
		s.mu.Unlock()
	}
	forget()
	defer forget()
	return p.cfg.Usage.SetSessionBudget(ctx, s.id, b)
}

// providerBudget returns the provider's budget as the registry has it now.
func (p *Pool) providerBudget(agent string) backends.Budget {
	spec, err := p.cfg.Resolver.Resolve(agent)
	if err != nil {
		return backends.Budget{}
	}
	return spec.Budget
}

// noteUsage records a usage event (ACP usage_update) of e's agent: its
// context occupancy and cumulative cost. ev is the event as published,
// its numbers out of bounds already left out by boundUsage, which said
// what: drops, each published here as a usage.dropped event. When the
// cost takes the running turn of e's agent past a budget, the turn is
// cancelled the way Cancel does it, after a budget.exceeded that says
// why. It runs after the event is published.
func (p *Pool) noteUsage(e *entry, ev backends.Event, drops []UsageDropped) {
	if ev.Type != backends.EventUsage {
		return
	}
	u, _, ok := parseUsageUpdate(ev.Data)
	if !ok {
		return
	}
	p.publishDrops(e.sess, e.key.agent, ev.Turn, drops)
	if p.cfg.Usage == nil || (u.Used == nil && u.Size == nil && u.Cost == nil && len(drops) > 0) {
		return
	}
	p.mu.Lock()
	asid := e.info.AgentSessionID
	p.mu.Unlock()
	rec := AgentUsage{Session: e.key.session, Agent: e.key.agent, AgentSessionID: asid, UpdatedAt: p.cfg.Now()}
	if u.Used != nil {
		rec.ContextUsed = *u.Used
	}
	if u.Size != nil {
		rec.ContextSize = *u.Size
	}
	if u.Cost != nil {
		amount := u.Cost.Amount
		rec.Cost, rec.Currency = &amount, u.Cost.Currency
	}
	ctx := context.WithoutCancel(p.ctx)
	if err := p.cfg.Usage.PutAgentUsage(ctx, rec); err != nil {
		p.logger.Warn("record usage", "session", rec.Session, "agent", rec.Agent, "err", err)
		return
	}
	if u.Cost != nil {
		p.stopOverBudget(e.sess, e.key.agent)
	}
}

// stopOverBudget cancels the running turn of session s (when agent is
// not "", only a turn of that agent) if a budget it counts against is
// used up, the way Cancel does it, after a budget.exceeded that says why.
// It does not wait for the turn to end: it runs in the agent's event
// callback, which the end of the turn waits for.
func (p *Pool) stopOverBudget(s *session, agent string) {
	ctx := context.WithoutCancel(p.ctx)
	s.mu.Lock()
	tr := s.turn
	var turn int64
	if tr != nil {
		turn = tr.id
	}
	s.mu.Unlock()
	if tr == nil || turn == 0 || (agent != "" && tr.agent != agent) {
		return
	}
	over, err := p.overBudget(ctx, s, tr.agent, p.providerBudget(tr.agent))
	if err != nil {
		p.logger.Warn("check budget", "session", s.id, "agent", tr.agent, "err", err)
		return
	}
	if over == nil {
		return
	}
	tr.mu.Lock()
	if tr.budget != nil {
		tr.mu.Unlock()
		return
	}
	over.Turn, over.Cancelled = turn, true
	tr.budget = over
	tr.mu.Unlock()
	p.budgetStops.Add(1)
	p.publish(s, backends.Event{Time: p.cfg.Now(), Type: EventBudgetExceeded, Agent: tr.agent, Turn: turn,
		Data: backends.MustJSON(over)})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		cctx, cancel := context.WithTimeout(p.ctx, p.cfg.StopTimeout)
		defer cancel()
		tr.sendCancel(cctx) // as Cancel: session/cancel first
		p.broker.CancelSession(s.id)
		tr.awaitEnd(cctx)
	}()
}

// noteTurnUsage records the tokens of turn t from the prompt answer's
// usage, and says on t how a budget ended it. It returns what goes into
// turn.ended: the budget that cancelled the turn, or nil. A turn whose
// tokens take a budget past its limit publishes budget.exceeded (the next
// prompt is refused).
func (p *Pool) noteTurnUsage(s *session, tr *turnRun, t *Turn, raw json.RawMessage) *BudgetExceeded {
	tr.mu.Lock()
	cancelled := tr.budget
	tr.mu.Unlock()
	if cancelled != nil && t.Error == "" {
		t.Error = "cancelled: " + cancelled.Message
	}
	if p.cfg.Usage == nil {
		return cancelled
	}
	ctx := context.WithoutCancel(p.ctx)
	tokens, ok := tokensOf(raw)
	if !ok {
		return cancelled
	}
	t.Usage = &tokens
	if err := p.cfg.Usage.PutTurnUsage(ctx, TurnUsage{Session: s.id, Turn: t.ID, Agent: t.Agent, Tokens: tokens}); err != nil {
		p.logger.Warn("record turn usage", "session", s.id, "turn", t.ID, "err", err)
		return cancelled
	}
	if cancelled != nil {
		return cancelled
	}
	over, err := p.overBudget(ctx, s, t.Agent, p.providerBudget(t.Agent))
	if err != nil {
		p.logger.Warn("check budget", "session", s.id, "agent", t.Agent, "err", err)
		return nil
	}
	if over != nil {
		over.Turn = t.ID
		p.publish(s, backends.Event{Time: p.cfg.Now(), Type: EventBudgetExceeded, Agent: t.Agent, Turn: t.ID,
			Data: backends.MustJSON(over)})
	}
	return nil
}

// turnUsage fills the Usage of turns from what the store recorded.
func (p *Pool) turnUsage(ctx context.Context, session string, turns []Turn) error {
	if p.cfg.Usage == nil || len(turns) == 0 {
		return nil
	}
	list, err := p.cfg.Usage.ListTurnUsage(ctx, session)
	if err != nil {
		return fmt.Errorf("usage of the turns of session %q: %w", session, err)
	}
	byTurn := make(map[int64]Tokens, len(list))
	for _, u := range list {
		byTurn[u.Turn] = u.Tokens
	}
	for i := range turns {
		if u, ok := byTurn[turns[i].ID]; ok {
			turns[i].Usage = &u
		}
	}
	return nil
}
