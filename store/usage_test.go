package store

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUsageKeepsLatestCostPerAgentSessionAndSums(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		loc := e.db(t, Config{})
		s, _ := openTest(t, at(loc, Config{}))
		mustSession(t, s, "s1")
		mustSession(t, s, "s2")
		cost := func(v float64) *float64 { return &v }
		puts := []AgentUsage{
			{SessionID: "s1", Agent: "a", AgentSessionID: "x", ContextUsed: 10, ContextSize: 100, Cost: cost(0.1), Currency: "USD"},
			{SessionID: "s1", Agent: "a", AgentSessionID: "x", ContextUsed: 20, ContextSize: 100, Cost: cost(0.3), Currency: "USD"},
			// An update without a cost or a size keeps what was recorded.
			{SessionID: "s1", Agent: "a", AgentSessionID: "x", ContextUsed: 25},
			{SessionID: "s1", Agent: "a", AgentSessionID: "y", Cost: cost(0.2), Currency: "USD"},
		}
		for _, u := range puts {
			if err := s.PutAgentUsage(ctx, u); err != nil {
				t.Fatalf("PutAgentUsage(%+v) error = %v", u, err)
			}
		}
		if err := s.PutAgentUsage(ctx, AgentUsage{SessionID: "nope", Agent: "a"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("PutAgentUsage(unknown session) error = %v; want ErrNotFound", err)
		}
		for _, u := range []TurnUsage{
			{SessionID: "s1", Turn: 1, Agent: "a", Input: 10, Output: 5, Total: 15},
			{SessionID: "s1", Turn: 2, Agent: "a", Input: 1, Output: 2, Total: 3},
			{SessionID: "s1", Turn: 3, Agent: "b", Input: 7, Output: 1, Thought: 2, Total: 10},
			{SessionID: "s2", Turn: 1, Agent: "a", Input: 100, Output: 1, Total: 101},
		} {
			if err := s.PutTurnUsage(ctx, u); err != nil {
				t.Fatalf("PutTurnUsage(%+v) error = %v", u, err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, _ = openTest(t, at(loc, Config{}))
		got, err := s.ListAgentUsage(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]AgentUsage{}
		for _, u := range got {
			byID[u.AgentSessionID] = u
		}
		if x := byID["x"]; x.ContextUsed != 25 || x.ContextSize != 100 || x.Cost == nil || *x.Cost != 0.3 || x.Currency != "USD" {
			t.Errorf("agent session x = %+v; want used 25 of 100, cost 0.3 USD", x)
		}
		if y := byID["y"]; y.Cost == nil || *y.Cost != 0.2 {
			t.Errorf("agent session y = %+v; want cost 0.2", y)
		}
		sums, err := s.SumTurnUsage(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		want := []TokenSum{
			{SessionID: "s1", Agent: "a", Turns: 2, Input: 11, Output: 7, Total: 18},
			{SessionID: "s1", Agent: "b", Turns: 1, Input: 7, Output: 1, Thought: 2, Total: 10},
			{SessionID: "s2", Agent: "a", Turns: 1, Input: 100, Output: 1, Total: 101},
		}
		if d := cmp.Diff(want, sums); d != "" {
			t.Errorf("SumTurnUsage(all) (-want +got):\n%s", d)
		}
		turns, err := s.ListTurnUsage(ctx, "s1")
		if err != nil || len(turns) != 3 || turns[2].Thought != 2 {
			t.Errorf("ListTurnUsage(s1) = %+v, %v; want 3 turns", turns, err)
		}
	})
}

func TestSessionBudgetSetClearAndDeleteWithSession(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		mustSession(t, s, "s1")
		if _, ok, err := s.SessionBudget(ctx, "s1"); ok || err != nil {
			t.Fatalf("SessionBudget before = %v, %v; want none", ok, err)
		}
		n, c := int64(1000), 2.5
		if err := s.SetSessionBudget(ctx, "s1", Budget{Tokens: &n, Cost: &c, Currency: "USD"}); err != nil {
			t.Fatal(err)
		}
		b, ok, err := s.SessionBudget(ctx, "s1")
		if err != nil || !ok || *b.Tokens != 1000 || *b.Cost != 2.5 || b.Currency != "USD" {
			t.Fatalf("SessionBudget = %+v, %v, %v; want 1000 tokens, 2.5 USD", b, ok, err)
		}
		if err := s.SetSessionBudget(ctx, "nope", Budget{Tokens: &n}); !errors.Is(err, ErrNotFound) {
			t.Errorf("SetSessionBudget(unknown) error = %v; want ErrNotFound", err)
		}
		if err := s.SetSessionBudget(ctx, "s1", Budget{}); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.SessionBudget(ctx, "s1"); ok {
			t.Errorf("SessionBudget after clearing: still set")
		}
	})
}

// TestSumTurnUsageClamped: token sums past the bounds of int64 (counts
// recorded before they were bounded) are held at them, never an error.
func TestSumTurnUsageClamped(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{}))
		mustSession(t, s, "s1")
		const huge = int64(1) << 62
		for turn := int64(1); turn <= 3; turn++ {
			if err := s.PutTurnUsage(ctx, TurnUsage{SessionID: "s1", Turn: turn, Agent: "a", Input: huge, Output: 2, Total: huge}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.SumTurnUsage(ctx, "s1")
		if err != nil {
			t.Fatalf("SumTurnUsage error = %v", err)
		}
		if len(got) != 1 || got[0].Input != math.MaxInt64 || got[0].Total != math.MaxInt64 || got[0].Output != 6 || got[0].Turns != 3 {
			t.Errorf("sums = %+v; want input and total held at MaxInt64, output 6 over 3 turns", got)
		}
	})
}
