package pool

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestParseUsageUpdateBounds: numbers of a usage_update that are not
// finite, negative, fractional counts or over the bounds are dropped,
// each said; the others are kept.
func TestParseUsageUpdateBounds(t *testing.T) {
	for _, tc := range []struct {
		data    string
		used    int64 // -1: none
		cost    float64
		hasCost bool
		dropped []string
	}{
		{`{"used":10,"size":100,"cost":{"amount":0.5,"currency":"USD"}}`, 10, 0.5, true, nil},
		{`{"used":10,"size":100,"cost":{"amount":1.7e308,"currency":"USD"}}`, 10, 0, false, []string{"cost.amount"}},
		{`{"used":10,"size":100,"cost":{"amount":1e400,"currency":"USD"}}`, 10, 0, false, []string{"cost.amount"}},
		{`{"cost":{"amount":-1,"currency":"USD"}}`, -1, 0, false, []string{"cost.amount"}},
		{`{"cost":{"amount":"NaN","currency":"USD"}}`, -1, 0, false, []string{"cost.amount"}},
		{`{"cost":{"amount":1e9,"currency":"USD"}}`, -1, 1e9, true, nil},
		{`{"used":-3,"size":100}`, -1, 0, false, []string{"used"}},
		{`{"used":3,"size":1e13}`, -1, 0, false, []string{"size"}},
		{`{"used":2.5,"size":"x"}`, -1, 0, false, []string{"used", "size"}},
		{`{"used":1e12,"size":1e12}`, 1e12, 0, false, nil},
	} {
		u, drops, ok := parseUsageUpdate(json.RawMessage(tc.data))
		if !ok {
			t.Errorf("%s: not parsed", tc.data)
			continue
		}
		var got []string
		for _, d := range drops {
			if d.Reason == "" || d.Value == "" {
				t.Errorf("%s: drop %+v says no value or reason", tc.data, d)
			}
			got = append(got, d.Dropped)
		}
		if strings.Join(got, ",") != strings.Join(tc.dropped, ",") {
			t.Errorf("%s: dropped %v, want %v", tc.data, got, tc.dropped)
		}
		if (u.Used == nil) != (tc.used == -1) || (u.Used != nil && *u.Used != tc.used) {
			t.Errorf("%s: used = %v, want %d", tc.data, u.Used, tc.used)
		}
		if (u.Cost != nil) != tc.hasCost || (u.Cost != nil && u.Cost.Amount != tc.cost) {
			t.Errorf("%s: cost = %+v, want %v (%v)", tc.data, u.Cost, tc.cost, tc.hasCost)
		}
	}
}

// TestCheckPromptUsageBounds: token counts of the prompt answer out of
// bounds are dropped and the others kept; a usage with nothing wrong is
// kept as the agent sent it.
func TestCheckPromptUsageBounds(t *testing.T) {
	raw := json.RawMessage(`{"inputTokens":12,"outputTokens":7}`)
	if got, drops := checkPromptUsage(raw); string(got) != string(raw) || drops != nil {
		t.Errorf("sane usage = %s, %v; want it as it is", got, drops)
	}
	got, drops := checkPromptUsage(json.RawMessage(`{"inputTokens":-5,"outputTokens":1e20,"thoughtTokens":1.5,"totalTokens":1e400,"cachedReadTokens":"NaN","cachedWriteTokens":7}`))
	if len(drops) != 5 {
		t.Errorf("drops = %+v; want 5", drops)
	}
	tok, ok := tokensOf(got)
	if !ok || tok != (Tokens{CachedWrite: 7}) {
		t.Errorf("tokens kept = %+v (%v) from %s; want only 7 cached-write", tok, ok, got)
	}
	if got, drops := checkPromptUsage(json.RawMessage(`{"totalTokens":-1}`)); got != nil || len(drops) != 1 {
		t.Errorf("usage with nothing left = %s, %v; want none and one drop", got, drops)
	}
	if got, drops := checkPromptUsage(json.RawMessage(`[1]`)); got != nil || len(drops) != 1 || drops[0].Dropped != "usage" {
		t.Errorf("usage not an object = %s, %v; want it dropped", got, drops)
	}
}

// TestUsageSumsStayFinite: sums of costs never reach +Inf, nor token
// sums wrap around.
func TestUsageSumsStayFinite(t *testing.T) {
	var list []Money
	list = addMoney(list, math.MaxFloat64, "USD")
	list = addMoney(list, math.MaxFloat64, "USD")
	list = addMoney(list, math.Inf(1), "USD")
	list = addMoney(list, math.NaN(), "USD")
	if len(list) != 1 || math.IsInf(list[0].Amount, 0) || math.IsNaN(list[0].Amount) {
		t.Errorf("sum = %+v; want finite", list)
	}
	if _, err := json.Marshal(list); err != nil {
		t.Errorf("sum does not encode: %v", err)
	}
	tok := Tokens{Total: math.MaxInt64 - 1}
	tok.add(Tokens{Total: 10})
	if tok.Total != math.MaxInt64 {
		t.Errorf("token sum = %d; want it held at MaxInt64", tok.Total)
	}
}
