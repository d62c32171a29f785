package permission

import (
	"testing"
)

// A policy's decision for an unknown kind is the strictest it gives any
// tool kind, never the "other" rule alone.
func TestPolicyDecideUnknown(t *testing.T) {
	tests := []struct {
		name  string
		rules map[string]string
		mode  string
		want  Decision
	}{
		{"execute deny beats other allow", map[string]string{"execute": "deny", "other": "allow"}, "", DecisionDeny},
		{"defaults ask", nil, "", DecisionAsk},
		{"full mode allows", nil, ModeFull, DecisionAllow},
		{"full mode with one deny", map[string]string{"delete": "deny"}, ModeFull, DecisionDeny},
		{"full mode with one ask", map[string]string{"fetch": "ask"}, ModeFull, DecisionAsk},
		{"every tool kind allowed", map[string]string{"edit": "allow", "delete": "allow", "move": "allow",
			"execute": "allow", "fetch": "allow", "switch_mode": "allow", "other": "allow"}, "", DecisionAllow},
		{"bridge rules do not count", map[string]string{"fs.write": "deny"}, ModeFull, DecisionAllow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PolicyFrom(tt.rules, tt.mode)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Decide(ActionUnknown); got != tt.want {
				t.Errorf("Decide(unknown) with %v %q = %q; want %q", tt.rules, tt.mode, got, tt.want)
			}
		})
	}
}

// A kind-less request is filed as unknown and denied when any tool kind is;
// a request that names its kind follows that kind's rule.
func TestRequestWithoutKind(t *testing.T) {
	policy, err := PolicyFrom(map[string]string{"execute": "deny", "other": "allow"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		kind       string
		wantAction Action
		want       Decision
	}{
		{"", ActionUnknown, DecisionDeny},
		{"fs.read", ActionUnknown, DecisionDeny},
		{"other", ActionOther, DecisionAllow},
		{"execute", ActionExecute, DecisionDeny},
	} {
		t.Run(tt.kind, func(t *testing.T) {
			h := newHarness(t, Config{})
			out := h.start(t.Context(), Request{Session: "s", Agent: "a", ToolKind: tt.kind, Options: agentOptions(), Policy: policy}).wait(t)
			if out.Decision != tt.want || out.DecidedBy != DecidedByPolicy {
				t.Errorf("Request(kind %q) = %+v; want %s by policy", tt.kind, out, tt.want)
			}
			if rs := h.recordsOf(out.RequestID); len(rs) != 1 || rs[0].Action != tt.wantAction {
				t.Errorf("records = %+v; want one of action %q", rs, tt.wantAction)
			}
		})
	}
}

// allow_always on an unknown action is not remembered: the next kind-less
// request is asked again.
func TestAnswerAlwaysNotRememberedForUnknown(t *testing.T) {
	h := newHarness(t, Config{})
	req := Request{Session: "s", Agent: "a", Options: agentOptions()}
	c, p := h.ask(t, req)
	if p.Request.Action != ActionUnknown {
		t.Fatalf("pending action = %q; want unknown", p.Request.Action)
	}
	if err := h.b.Answer("s", p.ID, KindAllowAlways); err != nil {
		t.Fatal(err)
	}
	c.wait(t)
	c2, p2 := h.ask(t, req)
	if err := h.b.Answer("s", p2.ID, KindRejectOnce); err != nil {
		t.Fatal(err)
	}
	if out := c2.wait(t); out.DecidedBy != DecidedByUser || out.Decision != DecisionDeny {
		t.Errorf("second kind-less request = %+v; want asked again and denied by the user", out)
	}
}
