package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// usageStep is a usage_update step of a scripted agent: context
// occupancy and the agent session's cumulative cost.
func usageStep(used, size int64, cost float64) agenttest.Step {
	raw, _ := json.Marshal(map[string]any{"sessionUpdate": "usage_update", "used": used, "size": size,
		"cost": map[string]any{"amount": cost, "currency": "USD"}})
	return agenttest.Step{Update: raw}
}

// TestEndToEndUsageAndBudgets runs a scripted agent that reports usage as
// real agents do (usage_update, the prompt answer's usage) through the
// binary: the CLI, the API and /metrics show it; a session budget refuses
// a prompt past it and cancels the turn that crosses it; raising it lets
// prompts run again; a provider budget in providers.json refuses too.
func TestEndToEndUsageAndBudgets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	script := agenttest.Script{Turns: []agenttest.Turn{
		{Steps: []agenttest.Step{{Chunk: "one"}, usageStep(9000, 200000, 0.3)},
			Usage: json.RawMessage(`{"inputTokens":1200,"outputTokens":300,"cachedReadTokens":800,"totalTokens":1500}`)},
		// Crosses the session's 0.5 USD mid-turn, then would work on.
		{Steps: []agenttest.Step{{Chunk: "two"}, usageStep(12000, 200000, 0.7), {WaitCancel: true}}},
		{Steps: []agenttest.Step{{Chunk: "three"}, usageStep(15000, 200000, 0.9)},
			Usage: json.RawMessage(`{"inputTokens":100,"outputTokens":20}`)},
	}}
	writeScripted(t, home, bin, map[string]any{"meter": script})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "hi\n"})
	ctx := context.Background()

	out, err := d.cli("session", "new", "--repo", repo, "--agent", "meter", "--id", "s-usage",
		"--budget-cost", "0.5", "--budget-currency", "usd")
	if err != nil {
		t.Fatalf("session new --budget-cost: %v\n%s", err, out)
	}
	out, err = d.cli("prompt", "s-usage", "first")
	// The turn's time depends on the machine's load: only its tokens are checked.
	if err != nil || !regexp.MustCompile(`turn 1 ended: end_turn after [0-9.]+m?s; 1500 tokens`).MatchString(out) {
		t.Errorf("prompt first: %v; want the usage and the turn's tokens\n%s", err, out)
	}
	out, err = d.cli("usage", "--session", "s-usage")
	if err != nil || !strings.Contains(out, "1500 (in 1200, out 300, cached 800) over 1 turns") || !strings.Contains(out, "0.3 USD") ||
		!strings.Contains(out, "9000/200000 (4%)") || !strings.Contains(out, "budget  0.5 USD") {
		t.Errorf("usage --session: %v\n%s", err, out)
	}

	// The second turn crosses the budget: cancelled, and it says why.
	out, _ = d.cli("prompt", "s-usage", "second")
	turns, err := d.client.Turns(ctx, "s-usage")
	if err != nil || len(turns) != 2 {
		t.Fatalf("turns = %+v, %v; want 2\n%s", turns, err, out)
	}
	if t2 := turns[1]; t2.StopReason != "cancelled" || !strings.Contains(t2.Error, "session budget exceeded: 0.7 USD used of 0.5 USD") {
		t.Errorf("turn 2 = stop %q, error %q; want cancelled by the budget\nprompt printed:\n%s", t2.StopReason, t2.Error, out)
	}
	if !strings.Contains(out, "cancelled: session budget exceeded: 0.7 USD used of 0.5 USD; raise it with: agentpool session budget s-usage") {
		t.Errorf("prompt of the cancelled turn printed no word of the budget:\n%s", out)
	}
	out, err = d.cli("events", "s-usage")
	if err != nil || !strings.Contains(out, "context 9000 of 200000 tokens (4%), cost so far 0.3 USD") ||
		!strings.Contains(out, "turn cancelled: session budget exceeded: 0.7 USD used of 0.5 USD") {
		t.Errorf("events: %v; want the usage updates and the budget's events\n%s", err, out)
	}
	ev := d.waitEvent("s-usage", pool.EventBudgetExceeded)
	var over pool.BudgetExceeded
	if err := json.Unmarshal(ev.Data, &over); err != nil || !over.Cancelled || over.Turn != 2 || over.Used != 0.7 || over.Limit != 0.5 {
		t.Errorf("budget.exceeded = %s; want turn 2 cancelled at 0.7 of 0.5 USD", ev.Data)
	}

	// The next prompt is refused, 402, with the figures and the way out.
	_, err = d.client.Prompt(ctx, "s-usage", "", "third", false)
	var ae *httpapi.Error
	if !errors.As(err, &ae) || ae.Status != 402 || ae.Code != httpapi.CodeBudgetExceeded || ae.Budget == nil || ae.Budget.Used != 0.7 ||
		!strings.Contains(ae.Message, "agentpool session budget s-usage --cost X --currency USD") {
		t.Errorf("prompt past the budget error = %v (%+v); want 402 budget_exceeded naming the way to raise it", err, ae)
	}
	out, err = d.cli("prompt", "s-usage", "third")
	if err == nil || !strings.Contains(out, "session budget exceeded: 0.7 USD used of 0.5 USD") {
		t.Errorf("agentpool prompt past the budget: %v\n%s", err, out)
	}

	// Raised, the session works again.
	out, err = d.cli("session", "budget", "s-usage", "--cost", "5", "--tokens", "100000")
	if err != nil || !strings.Contains(out, "100000 tokens, 5 USD") {
		t.Fatalf("session budget: %v\n%s", err, out)
	}
	if out, err := d.cli("prompt", "s-usage", "third"); err != nil {
		t.Fatalf("prompt after raising the budget: %v\n%s", err, out)
	}
	out, err = d.cli("session", "show", "s-usage")
	if err != nil || !strings.Contains(out, "usage:") || !strings.Contains(out, "1620 (in 1300, out 320, cached 800) over 2 turns") ||
		!strings.Contains(out, "0.9 USD") || !strings.Contains(out, "15000/200000") {
		t.Errorf("session show: %v\n%s", err, out)
	}

	// /metrics: by provider, never by session.
	metrics := getText(t, d, "/metrics")
	for _, want := range []string{
		`agentpool_usage_tokens_total{kind="total",provider="meter"} 1620`,
		`agentpool_usage_tokens_total{kind="cached_read",provider="meter"} 800`,
		`agentpool_usage_cost{currency="USD",provider="meter"} 0.9`,
		`agentpool_usage_context_ratio_max{provider="meter"} 0.075`,
		`agentpool_budget_cancels_total 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if strings.Contains(metrics, "s-usage") {
		t.Errorf("/metrics names a session")
	}

	// A provider budget, from providers.json: over all of meter's sessions.
	var doc map[string]any
	raw, err := os.ReadFile(filepath.Join(home, providersFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["providers"].(map[string]any)["meter"].(map[string]any)["budget"] = map[string]any{"tokens": 1000}
	raw, _ = json.Marshal(doc)
	if err := os.WriteFile(filepath.Join(home, providersFile), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		rep, err := d.client.Usage(ctx)
		if err == nil && len(rep.Providers) == 1 && rep.Providers[0].Budget != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the provider budget never showed in GET /v1/usage: %+v, %v", rep, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, err = d.cli("session", "new", "--repo", repo, "--agent", "meter", "--id", "s-other")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	out, err = d.cli("prompt", "s-other", "hello")
	if err == nil || !strings.Contains(out, `provider "meter" budget exceeded: 1620 tokens used of 1000 tokens over all its sessions`) {
		t.Errorf("prompt past the provider's budget: %v\n%s", err, out)
	}
	out, err = d.cli("usage")
	if err != nil || !strings.Contains(out, "meter") || !strings.Contains(out, "1000 tokens") || !strings.Contains(out, "s-usage") {
		t.Errorf("usage: %v\n%s", err, out)
	}
}
