package pool_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// TestUsageEventsCarryOnlyNumbersInBounds: a usage_update whose cost or
// context figures are out of bounds is published and stored without
// them, each said in a usage.dropped event that follows; the figures
// within bounds and the fields the pool does not read stay as the agent
// sent them. What shows the stream (the CLI's "cost so far", the page)
// never shows a dropped number.
func TestUsageEventsCarryOnlyNumbersInBounds(t *testing.T) {
	raw := func(s string) agenttest.Step { return agenttest.Step{Update: json.RawMessage(s)} }
	script := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		raw(`{"sessionUpdate":"usage_update","used":100,"size":1000,"cost":{"amount":1.7e308,"currency":"USD"},"_meta":{"kept":true}}`),
		raw(`{"sessionUpdate":"usage_update","used":-1,"size":1000,"cost":{"amount":0.25,"currency":"USD"}}`),
		raw(`{"sessionUpdate":"usage_update","used":200,"size":1000,"cost":{"amount":0.5,"currency":"USD"}}`),
	}}}}
	e := newEnv(t, map[string]any{"fake": providerEntry(script)}, nil)
	s := e.session("fake")
	e.prompt(s.ID, "", "go")

	var usages []map[string]json.RawMessage
	var dropped []string
	for _, ev := range e.events(s.ID) {
		switch ev.Type {
		case backends.EventUsage:
			var m map[string]json.RawMessage
			if err := json.Unmarshal(ev.Data, &m); err != nil {
				t.Fatalf("usage event %s: %v", ev.Data, err)
			}
			usages = append(usages, m)
			if strings.Contains(string(ev.Data), "e+308") || strings.Contains(string(ev.Data), "1.7e308") || strings.Contains(string(ev.Data), `"used":-1`) {
				t.Errorf("usage event %s carries a number the pool dropped", ev.Data)
			}
		case pool.EventUsageDropped:
			var d pool.UsageDropped
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			dropped = append(dropped, d.Dropped)
		}
	}
	show := func(m map[string]json.RawMessage) string { b, _ := json.Marshal(m); return string(b) }
	if len(usages) != 3 {
		t.Fatalf("usage events = %d; want 3", len(usages))
	}
	if _, ok := usages[0]["cost"]; ok || string(usages[0]["used"]) != "100" || string(usages[0]["size"]) != "1000" || usages[0]["_meta"] == nil {
		t.Errorf("first usage = %v; want its context and _meta without the cost", show(usages[0]))
	}
	if _, ok := usages[1]["used"]; ok {
		t.Errorf("second usage = %v; want no context (used was negative)", show(usages[1]))
	}
	if _, ok := usages[1]["size"]; ok || usages[1]["cost"] == nil {
		t.Errorf("second usage = %v; want its cost without the context", show(usages[1]))
	}
	if string(usages[2]["used"]) != "200" || usages[2]["cost"] == nil {
		t.Errorf("third usage = %v; want it as the agent sent it", show(usages[2]))
	}
	if strings.Join(dropped, ",") != "cost.amount,used" {
		t.Errorf("usage.dropped events = %v; want cost.amount then used", dropped)
	}
	u, err := e.p.SessionUsage(t.Context(), s.ID)
	if err != nil || len(u.Cost) != 1 || u.Cost[0].Amount != 0.5 {
		t.Errorf("SessionUsage = %+v, %v; want 0.5 USD, the last cost in bounds", u, err)
	}
}
