package wiring

import (
	"context"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/store"
)

// Usage adapts *store.Store to pool.UsageStore.
type Usage struct{ S *store.Store }

var _ pool.UsageStore = Usage{}

// PutTurnUsage records the tokens of a turn.
func (a Usage) PutTurnUsage(ctx context.Context, u pool.TurnUsage) error {
	return notFound(a.S.PutTurnUsage(ctx, store.TurnUsage{SessionID: u.Session, Turn: u.Turn, Agent: u.Agent,
		Input: u.Input, Output: u.Output, CachedRead: u.CachedRead, CachedWrite: u.CachedWrite, Thought: u.Thought, Total: u.Total}))
}

func tokens(in, out, cr, cw, th, total int64) pool.Tokens {
	return pool.Tokens{Input: in, Output: out, CachedRead: cr, CachedWrite: cw, Thought: th, Total: total}
}

// ListTurnUsage reads the tokens of a session's turns.
func (a Usage) ListTurnUsage(ctx context.Context, session string) ([]pool.TurnUsage, error) {
	l, err := a.S.ListTurnUsage(ctx, session)
	out := make([]pool.TurnUsage, 0, len(l))
	for _, u := range l {
		out = append(out, pool.TurnUsage{Session: u.SessionID, Turn: u.Turn, Agent: u.Agent,
			Tokens: tokens(u.Input, u.Output, u.CachedRead, u.CachedWrite, u.Thought, u.Total)})
	}
	return out, err
}

// SumTurnUsage sums the tokens per (session, agent).
func (a Usage) SumTurnUsage(ctx context.Context, session string) ([]pool.TokenSum, error) {
	l, err := a.S.SumTurnUsage(ctx, session)
	out := make([]pool.TokenSum, 0, len(l))
	for _, u := range l {
		out = append(out, pool.TokenSum{Session: u.SessionID, Agent: u.Agent, Turns: u.Turns,
			Tokens: tokens(u.Input, u.Output, u.CachedRead, u.CachedWrite, u.Thought, u.Total)})
	}
	return out, err
}

// PutAgentUsage records what an agent session last reported.
func (a Usage) PutAgentUsage(ctx context.Context, u pool.AgentUsage) error {
	return notFound(a.S.PutAgentUsage(ctx, store.AgentUsage{SessionID: u.Session, Agent: u.Agent, AgentSessionID: u.AgentSessionID,
		ContextUsed: u.ContextUsed, ContextSize: u.ContextSize, Cost: u.Cost, Currency: u.Currency, UpdatedAt: u.UpdatedAt}))
}

// ListAgentUsage reads what agent sessions last reported.
func (a Usage) ListAgentUsage(ctx context.Context, session string) ([]pool.AgentUsage, error) {
	l, err := a.S.ListAgentUsage(ctx, session)
	out := make([]pool.AgentUsage, 0, len(l))
	for _, u := range l {
		out = append(out, pool.AgentUsage{Session: u.SessionID, Agent: u.Agent, AgentSessionID: u.AgentSessionID,
			ContextUsed: u.ContextUsed, ContextSize: u.ContextSize, Cost: u.Cost, Currency: u.Currency, UpdatedAt: u.UpdatedAt})
	}
	return out, err
}

// SetSessionBudget sets or removes a session's budget.
func (a Usage) SetSessionBudget(ctx context.Context, session string, b backends.Budget) error {
	var sb store.Budget
	if b.Tokens > 0 {
		sb.Tokens = &b.Tokens
	}
	if b.Cost > 0 {
		sb.Cost, sb.Currency = &b.Cost, b.Currency
	}
	return notFound(a.S.SetSessionBudget(ctx, session, sb))
}

// SessionBudget reads a session's budget, zero when it has none.
func (a Usage) SessionBudget(ctx context.Context, session string) (backends.Budget, error) {
	sb, _, err := a.S.SessionBudget(ctx, session)
	var b backends.Budget
	if sb.Tokens != nil {
		b.Tokens = *sb.Tokens
	}
	if sb.Cost != nil {
		b.Cost, b.Currency = *sb.Cost, sb.Currency
	}
	return b, err
}
