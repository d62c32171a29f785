package pool

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// EventBudgetExceeded is published when a session's or a provider's budget
// is used up: a running turn that crossed it is cancelled (its turn.ended
// then carries "budget_exceeded" too), and prompts are refused until the
// budget is raised. Its data is a BudgetExceeded.
const EventBudgetExceeded backends.EventType = "budget.exceeded"

// EventBudgetChanged is published when a session's own budget is set or
// removed; its data is the new backends.Budget.
const EventBudgetChanged backends.EventType = "budget.changed"

// UsageStore is what the pool needs to keep what agents report they used
// and the sessions' budgets. Missing sessions are errors wrapping
// ErrNotFound.
type UsageStore interface {
	// PutTurnUsage records the tokens of a turn, replacing earlier ones.
	PutTurnUsage(ctx context.Context, u TurnUsage) error
	// ListTurnUsage returns the recorded tokens of a session's turns.
	ListTurnUsage(ctx context.Context, session string) ([]TurnUsage, error)
	// SumTurnUsage sums the tokens per (session, agent), of one session
	// or of all when session is empty.
	SumTurnUsage(ctx context.Context, session string) ([]TokenSum, error)
	// PutAgentUsage records what an agent session last reported; zero
	// context figures and a nil cost keep the recorded ones.
	PutAgentUsage(ctx context.Context, u AgentUsage) error
	// ListAgentUsage returns what agent sessions last reported, of one
	// session or of all when session is empty, oldest update first.
	ListAgentUsage(ctx context.Context, session string) ([]AgentUsage, error)
	// SetSessionBudget sets (a zero Budget: removes) a session's budget.
	SetSessionBudget(ctx context.Context, session string, b backends.Budget) error
	// SessionBudget returns a session's budget, zero when it has none.
	SessionBudget(ctx context.Context, session string) (backends.Budget, error)
}

// Tokens counts the tokens of a turn, or a sum of turns, as agents report
// them in the prompt answer's usage.
type Tokens struct {
	Input       int64 `json:"input"`
	Output      int64 `json:"output"`
	CachedRead  int64 `json:"cached_read,omitempty"`
	CachedWrite int64 `json:"cached_write,omitempty"`
	Thought     int64 `json:"thought,omitempty"`
	// Total is what counts against a budget: the agent's totalTokens, or
	// input + output + thought when it sends none.
	Total int64 `json:"total"`
}

// add adds o to t, saturating rather than wrapping.
func (t *Tokens) add(o Tokens) {
	t.Input = addSat(t.Input, o.Input)
	t.Output = addSat(t.Output, o.Output)
	t.CachedRead = addSat(t.CachedRead, o.CachedRead)
	t.CachedWrite = addSat(t.CachedWrite, o.CachedWrite)
	t.Thought = addSat(t.Thought, o.Thought)
	t.Total = addSat(t.Total, o.Total)
}

// TurnUsage is the tokens of one turn of a session.
type TurnUsage struct {
	Session string `json:"session"`
	Turn    int64  `json:"turn"`
	Agent   string `json:"agent"`
	Tokens
}

// TokenSum is the tokens of the turns of one (session, agent).
type TokenSum struct {
	Session string `json:"session"`
	Agent   string `json:"agent"`
	Turns   int64  `json:"turns"`
	Tokens
}

// AgentUsage is what one agent session of a (session, agent) last
// reported in usage_update: its context occupancy and its cost so far
// (cumulative for that agent session, in its currency).
type AgentUsage struct {
	Session        string    `json:"session"`
	Agent          string    `json:"agent"`
	AgentSessionID string    `json:"agent_session_id,omitempty"`
	ContextUsed    int64     `json:"context_used"`
	ContextSize    int64     `json:"context_size"`
	Cost           *float64  `json:"cost,omitempty"`
	Currency       string    `json:"currency,omitempty"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// Money is an amount in one currency. Amounts in different currencies
// are kept apart, never added.
type Money struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

// Context is an agent's context window occupancy, as it last reported it.
type Context struct {
	Used int64 `json:"used"`
	Size int64 `json:"size"`
}

// promptUsage is the prompt answer's usage (ACP PromptResponse.usage).
type promptUsage struct {
	Input       int64 `json:"inputTokens"`
	Output      int64 `json:"outputTokens"`
	CachedRead  int64 `json:"cachedReadTokens"`
	CachedWrite int64 `json:"cachedWriteTokens"`
	Thought     int64 `json:"thoughtTokens"`
	Total       int64 `json:"totalTokens"`
}

// tokensOf reads the prompt answer's usage; ok is false when it has none.
func tokensOf(raw json.RawMessage) (Tokens, bool) {
	if len(raw) == 0 {
		return Tokens{}, false
	}
	var u promptUsage
	if err := json.Unmarshal(raw, &u); err != nil {
		return Tokens{}, false
	}
	t := Tokens{Input: u.Input, Output: u.Output, CachedRead: u.CachedRead, CachedWrite: u.CachedWrite,
		Thought: u.Thought, Total: u.Total}
	if t.Total == 0 {
		t.Total = t.Input + t.Output + t.Thought
	}
	return t, t != Tokens{}
}

// usageUpdate is the data of a usage event (ACP usage_update).
type usageUpdate struct {
	Used *int64 `json:"used"`
	Size *int64 `json:"size"`
	Cost *struct {
		Amount   float64 `json:"amount"`
		Currency string  `json:"currency"`
	} `json:"cost"`
}

// addMoney adds an amount to the one of its currency in list. An amount
// that is not a finite number is left out (one recorded before amounts
// were bounded), and a sum is held at the largest finite float64 rather
// than overflow to +Inf (which JSON cannot carry).
func addMoney(list []Money, amount float64, currency string) []Money {
	if math.IsNaN(amount) || math.IsInf(amount, 0) {
		return list
	}
	for i := range list {
		if list[i].Currency == currency {
			list[i].Amount = math.Max(math.Min(list[i].Amount+amount, math.MaxFloat64), -math.MaxFloat64)
			return list
		}
	}
	return append(list, Money{Amount: amount, Currency: currency})
}

// amountIn returns the amount of list in currency (0 when none).
func amountIn(list []Money, currency string) float64 {
	for _, m := range list {
		if m.Currency == currency {
			return m.Amount
		}
	}
	return 0
}
