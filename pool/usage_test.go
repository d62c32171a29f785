package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// usageUpdate is a usage_update step: context occupancy and cumulative cost.
func usageUpdate(used, size int64, cost float64, currency string) agenttest.Step {
	u := map[string]any{"sessionUpdate": "usage_update", "used": used, "size": size}
	if currency != "" {
		u["cost"] = map[string]any{"amount": cost, "currency": currency}
	}
	raw, _ := json.Marshal(u)
	return agenttest.Step{Update: raw}
}

func TestUsageRecordedPerTurnSessionAndProvider(t *testing.T) {
	script := agenttest.Script{Turns: []agenttest.Turn{
		{Steps: []agenttest.Step{{Chunk: "one"}, usageUpdate(1000, 200000, 0.25, "USD")},
			Usage: json.RawMessage(`{"inputTokens":100,"outputTokens":20,"cachedReadTokens":50,"thoughtTokens":5,"totalTokens":125}`)},
		{Steps: []agenttest.Step{{Chunk: "two"}, usageUpdate(1500, 200000, 0.5, "USD"), usageUpdate(1600, 200000, 0.5, "USD")},
			Usage: json.RawMessage(`{"inputTokens":10,"outputTokens":2}`)},
	}}
	euro := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{usageUpdate(5, 1000, 0.1, "EUR")}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(script), "euro": providerEntry(euro)}, nil)
	ctx := context.Background()
	s := e.session("fake")
	t1 := e.prompt(s.ID, "", "a")
	if t1.Usage == nil || t1.Usage.Total != 125 || t1.Usage.CachedRead != 50 {
		t.Errorf("turn 1 usage = %+v; want total 125, cached 50", t1.Usage)
	}
	t2 := e.prompt(s.ID, "", "b")
	if t2.Usage == nil || t2.Usage.Total != 12 {
		t.Errorf("turn 2 usage = %+v; want total 12 (input + output); turn %+v", t2.Usage, t2)
	}
	e.prompt(s.ID, "euro", "c")
	e.prompt(s.ID, "fake", "d")
	u, err := e.p.SessionUsage(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Cost is cumulative per agent session: the latest value, not a sum of
	// updates; a second currency is kept apart.
	// The third turn of fake repeats the second: its usage_update again
	// says 0.5 USD in all, its answer 12 more tokens.
	if u.Tokens.Total != 149 || u.Turns != 3 || len(u.Cost) != 2 || u.Cost[0] != (pool.Money{Amount: 0.1, Currency: "EUR"}) ||
		u.Cost[1] != (pool.Money{Amount: 0.5, Currency: "USD"}) {
		t.Errorf("SessionUsage = %+v; want 149 tokens in 3 turns, 0.1 EUR and 0.5 USD", u)
	}
	if len(u.Agents) != 2 || u.Agents[1].Agent != "fake" || u.Agents[1].Context == nil || *u.Agents[1].Context != (pool.Context{Used: 1600, Size: 200000}) {
		t.Errorf("SessionUsage agents = %+v; want fake at 1600 of 200000", u.Agents)
	}
	turns, err := e.p.Turns(ctx, s.ID)
	if err != nil || len(turns) != 4 || turns[0].Usage == nil || turns[0].Usage.Total != 125 || turns[2].Usage != nil {
		t.Errorf("Turns = %+v, %v; want the usage of each turn", turns, err)
	}
	r, err := e.p.Usage(ctx)
	if err != nil || len(r.Providers) != 2 || r.Providers[1].Provider != "fake" || r.Providers[1].Tokens.Total != 149 ||
		r.Providers[1].Sessions != 1 || len(r.Providers[1].Cost) != 1 || r.Sessions[0].Session != s.ID {
		t.Errorf("Usage = %+v, %v; want provider fake with 149 tokens and 0.5 USD in 1 session", r, err)
	}
}

// A waiter that comes after its turn ended (a quick turn can end before
// the prompt's caller starts waiting) gets the turn with its usage, as one
// that waited while it ran: the session's last turn from memory, an older
// one from the store.
func TestWaitTurnAfterItEndedHasItsUsage(t *testing.T) {
	script := agenttest.Script{Turns: []agenttest.Turn{
		{Steps: []agenttest.Step{{Chunk: "one"}}, Usage: json.RawMessage(`{"inputTokens":7,"outputTokens":3}`)},
	}}
	e := newEnv(t, map[string]any{"fake": providerEntry(script)}, nil)
	reads := &turnUsageReads{}
	e.wrapUsage = func(u pool.UsageStore) pool.UsageStore { reads.UsageStore = u; return reads }
	e.shutdown()
	e.open()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := e.session("fake")
	var started []pool.Turn
	for _, text := range []string{"a", "b"} {
		st, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: text})
		if err != nil {
			t.Fatal(err)
		}
		started = append(started, st)
		for {
			sess, err := e.p.Get(ctx, s.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !sess.Busy {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("the turn did not end")
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	// The last turn first: it is answered from memory, the one before
	// from the store.
	for i, want := range []int64{0, 1} {
		st := started[len(started)-1-i]
		got, err := e.p.WaitTurn(ctx, s.ID, st.ID)
		if err != nil || got.ID != st.ID || got.EndedAt == nil || got.Usage == nil || got.Usage.Total != 10 {
			t.Errorf("WaitTurn(%d) after its end = %+v (usage %+v), %v; want the ended turn with 10 tokens", st.ID, got, got.Usage, err)
		}
		if n := reads.n.Load(); n != want {
			t.Errorf("after WaitTurn(%d): the turns' usage read %d times; want %d", st.ID, n, want)
		}
	}
}

// turnUsageReads counts the reads of sessions' turn usage.
type turnUsageReads struct {
	pool.UsageStore
	n atomic.Int64
}

func (r *turnUsageReads) ListTurnUsage(ctx context.Context, session string) ([]pool.TurnUsage, error) {
	r.n.Add(1)
	return r.UsageStore.ListTurnUsage(ctx, session)
}

func TestSessionBudgetRefusesAndCancels(t *testing.T) {
	script := agenttest.Script{Turns: []agenttest.Turn{
		{Steps: []agenttest.Step{usageUpdate(10, 100, 0.3, "USD")}, Usage: json.RawMessage(`{"inputTokens":40,"outputTokens":10}`)},
		// Crosses the cost budget mid-turn, then works on until cancelled.
		{Steps: []agenttest.Step{usageUpdate(20, 100, 0.6, "USD"), {WaitCancel: true}}},
		// Reports nothing: only a budget lowered under what was used stops it.
		{Steps: []agenttest.Step{{Chunk: "working"}, {WaitCancel: true}}},
	}}
	e := newEnv(t, map[string]any{"fake": providerEntry(script)}, nil)
	ctx := context.Background()
	s := e.session("fake")
	if err := e.p.SetBudget(ctx, s.ID, backends.Budget{Cost: 0.5}); !errors.Is(err, pool.ErrInvalid) {
		t.Errorf("SetBudget(cost without currency) error = %v; want ErrInvalid", err)
	}
	if err := e.p.SetBudget(ctx, s.ID, backends.Budget{Cost: 0.5, Currency: "USD"}); err != nil {
		t.Fatal(err)
	}
	e.prompt(s.ID, "", "first")
	t2 := e.prompt(s.ID, "", "second")
	if t2.StopReason != "cancelled" || !strings.Contains(t2.Error, "session budget exceeded: 0.6 USD used of 0.5 USD") {
		t.Errorf("turn 2 = stop %q, error %q; want cancelled by the session budget", t2.StopReason, t2.Error)
	}
	evs := e.events(s.ID)
	var over pool.BudgetExceeded
	for _, ev := range evs {
		if ev.Type == pool.EventBudgetExceeded {
			_ = json.Unmarshal(ev.Data, &over)
		}
	}
	if over.Turn != t2.ID || !over.Cancelled || over.Kind != pool.BudgetCost || over.Used != 0.6 {
		t.Errorf("budget.exceeded = %+v; want turn %d cancelled at 0.6 USD", over, t2.ID)
	}
	_, err := e.p.Prompt(ctx, pool.PromptRequest{Session: s.ID, Text: "third"})
	var be *pool.BudgetError
	if !errors.As(err, &be) || !errors.Is(err, pool.ErrBudgetExceeded) || !strings.Contains(err.Error(), "agentpool session budget "+s.ID) {
		t.Fatalf("Prompt past the budget error = %v; want a BudgetError saying how to raise it", err)
	}
	// A token budget counts the turns' tokens (50 so far).
	if err := e.p.SetBudget(ctx, s.ID, backends.Budget{Tokens: 50}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Prompt(ctx, pool.PromptRequest{Session: s.ID, Text: "fourth"}); !errors.As(err, &be) || be.Kind != pool.BudgetTokens || be.Used != 50 {
		t.Errorf("Prompt past the token budget error = %v; want 50 of 50 tokens", err)
	}
	// A cost budget in another currency counts nothing.
	if err := e.p.SetBudget(ctx, s.ID, backends.Budget{Cost: 0.01, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}
	t3, err := e.p.StartPrompt(ctx, pool.PromptRequest{Session: s.ID, Text: "fifth"})
	if err != nil {
		t.Fatalf("Prompt under an EUR budget error = %v; want none (USD is not counted)", err)
	}
	// A budget lowered under what was used stops the running turn.
	if err := e.p.SetBudget(ctx, s.ID, backends.Budget{Tokens: 10}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t5, err := e.p.WaitTurn(wctx, s.ID, t3.ID)
	if err != nil || t5.StopReason != "cancelled" || !strings.Contains(t5.Error, "session budget exceeded: 50 tokens used of 10 tokens") {
		t.Errorf("turn under a lowered budget = %+v, %v; want cancelled by it", t5, err)
	}
}

// budgetReads counts the reads of sessions' budgets.
type budgetReads struct {
	pool.UsageStore
	n atomic.Int64
}

func (b *budgetReads) SessionBudget(ctx context.Context, session string) (backends.Budget, error) {
	b.n.Add(1)
	return b.UsageStore.SessionBudget(ctx, session)
}

// TestSessionBudgetKeptWithTheSession: a prompt does not read the
// session's budget from the store each time; it is read once, and again
// after each change, which the next prompt obeys.
func TestSessionBudgetKeptWithTheSession(t *testing.T) {
	script := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "ok"}}, Usage: json.RawMessage(`{"inputTokens":4,"outputTokens":1}`)}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(script)}, nil)
	reads := &budgetReads{}
	e.wrapUsage = func(u pool.UsageStore) pool.UsageStore { reads.UsageStore = u; return reads }
	e.shutdown()
	e.open()
	ctx := context.Background()
	s := e.session("fake")
	for _, text := range []string{"one", "two", "three"} {
		e.prompt(s.ID, "", text)
	}
	if n := reads.n.Load(); n != 1 {
		t.Errorf("3 prompts read the session's budget %d times; want once", n)
	}
	if err := e.p.SetBudget(ctx, s.ID, backends.Budget{Tokens: 15}); err != nil {
		t.Fatal(err)
	}
	_, err := e.p.Prompt(ctx, pool.PromptRequest{Session: s.ID, Text: "four"})
	var be *pool.BudgetError
	if !errors.As(err, &be) || be.Kind != pool.BudgetTokens || be.Used != 15 {
		t.Errorf("prompt after the budget was set: %v; want refused at 15 of 15 tokens", err)
	}
	if err := e.p.SetBudget(ctx, s.ID, backends.Budget{}); err != nil {
		t.Fatal(err)
	}
	before := reads.n.Load()
	for _, text := range []string{"five", "six"} {
		if tn := e.prompt(s.ID, "", text); tn.StopReason != string(backends.StopEndTurn) {
			t.Errorf("prompt %q after the budget was removed: stop %q; want end_turn", text, tn.StopReason)
		}
	}
	if n := reads.n.Load() - before; n != 1 {
		t.Errorf("2 prompts after a change read the budget %d times; want once", n)
	}
}
