package registry

import (
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
)

func TestBudgetField(t *testing.T) {
	sch := compileSchema(t)
	tests := []struct {
		name, budget string
		want         backends.Budget
		err          string // "" = valid
	}{
		{"tokens", `{"tokens": 1000000}`, backends.Budget{Tokens: 1000000}, ""},
		{"cost", `{"cost": 12.5, "currency": "USD"}`, backends.Budget{Cost: 12.5, Currency: "USD"}, ""},
		{"both", `{"tokens": 5, "cost": 1, "currency": "EUR"}`, backends.Budget{Tokens: 5, Cost: 1, Currency: "EUR"}, ""},
		{"no currency", `{"cost": 1}`, backends.Budget{}, `"cost" needs its "currency"`},
		{"bad currency", `{"cost": 1, "currency": "usd"}`, backends.Budget{}, "three capital letters"},
		{"negative", `{"tokens": -1}`, backends.Budget{}, "positive number of tokens"},
		{"unknown", `{"token": 5}`, backends.Budget{}, `unknown field "token"`},
		{"empty", `{}`, backends.Budget{}, `want "tokens" and/or "cost"`},
		{"not object", `5`, backends.Budget{}, "want"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := `{"version": 1, "providers": {"claude": {"budget": ` + tc.budget + `}}}`
			defs, err := parseDocument("providers.json", []byte(doc), builtins("/bin/agentpool"))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "providers.claude.budget") {
					t.Errorf("parseDocument(budget %s) error = %v; want one naming providers.claude.budget: %q", tc.budget, err, tc.err)
				}
				if validateAgainst(t, sch, []byte(doc)) == nil {
					t.Errorf("schema accepts budget %s", tc.budget)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseDocument(budget %s) error = %v", tc.budget, err)
			}
			if err := validateAgainst(t, sch, []byte(doc)); err != nil {
				t.Errorf("schema refuses budget %s: %v", tc.budget, err)
			}
			if got := defs["claude"].budget; got != tc.want {
				t.Errorf("budget = %+v; want %+v", got, tc.want)
			}
			if got := specOf(defs["claude"], lookup{path: "/bin/claude"}, "/home/u").Budget; got != tc.want {
				t.Errorf("spec budget = %+v; want %+v", got, tc.want)
			}
		})
	}
}
