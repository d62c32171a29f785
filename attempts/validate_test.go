package attempts

import (
	"errors"
	"testing"
)

// TestValidateNamesTheField checks that each bad request is refused with
// the JSON field at fault, and that good ones give one agent per attempt.
func TestValidateNamesTheField(t *testing.T) {
	m := &Manager{cfg: Config{Known: func(a string) bool { return a == "claude" || a == "codex" }}}
	for _, c := range []struct {
		name  string
		req   Request
		field string
		n     int
	}{
		{"no prompt", Request{Repo: "/r", Agent: "claude"}, "prompt", 0},
		{"relative repo", Request{Prompt: "p", Repo: "r", Agent: "claude"}, "repo", 0},
		{"no agents", Request{Prompt: "p", Repo: "/r"}, "agents", 0},
		{"both forms", Request{Prompt: "p", Repo: "/r", Agents: []string{"claude"}, Agent: "codex"}, "agents", 0},
		{"unknown in agents", Request{Prompt: "p", Repo: "/r", Agents: []string{"claude", "nope"}}, "agents", 0},
		{"unknown agent", Request{Prompt: "p", Repo: "/r", Agent: "nope", N: 2}, "agent", 0},
		{"n too big", Request{Prompt: "p", Repo: "/r", Agent: "claude", N: MaxAttempts + 1}, "n", 0},
		{"n negative", Request{Prompt: "p", Repo: "/r", Agent: "claude", N: -2}, "n", 0},
		{"too many agents", Request{Prompt: "p", Repo: "/r", Agents: make([]string, MaxAttempts+1)}, "agents", 0},
		{"n of one agent", Request{Prompt: "p", Repo: "/r", Agent: "codex", N: 3}, "", 3},
		{"agent alone", Request{Prompt: "p", Repo: "/r", Agent: "codex"}, "", 1},
		{"agents", Request{Prompt: "p", Repo: "/r", Agents: []string{"claude", "codex"}}, "", 2},
	} {
		agents, err := m.validate(c.req)
		var fe *FieldError
		switch {
		case c.field == "" && (err != nil || len(agents) != c.n):
			t.Errorf("%s: %v, %v; want %d agents", c.name, agents, err, c.n)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%s: %v; want a FieldError naming %q", c.name, err, c.field)
		}
	}
}
