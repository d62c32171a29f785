package permission

import (
	"errors"
	"strings"
	"testing"
)

func TestActionFromToolKind(t *testing.T) {
	tests := []struct {
		kind string
		want Action
	}{
		{"read", ActionRead},
		{"edit", ActionEdit},
		{"delete", ActionDelete},
		{"move", ActionMove},
		{"search", ActionSearch},
		{"execute", ActionExecute},
		{"think", ActionThink},
		{"fetch", ActionFetch},
		{"switch_mode", ActionSwitchMode},
		{"other", ActionOther},
		{"", ActionUnknown},
		{"Read", ActionUnknown},
		{"launch_missiles", ActionUnknown},
		{"fs.read", ActionUnknown},
		{"fs.write", ActionUnknown},
		{"terminal", ActionUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			if got := ActionFromToolKind(tt.kind); got != tt.want {
				t.Errorf("ActionFromToolKind(%q) = %q; want %q", tt.kind, got, tt.want)
			}
		})
	}
}

func TestRiskOf(t *testing.T) {
	want := map[Action]Risk{
		ActionRead: RiskLow, ActionSearch: RiskLow, ActionThink: RiskLow, ActionFSRead: RiskLow,
		ActionEdit: RiskMedium, ActionMove: RiskMedium, ActionFetch: RiskMedium,
		ActionSwitchMode: RiskMedium, ActionFSWrite: RiskMedium,
		ActionDelete: RiskHigh, ActionExecute: RiskHigh, ActionTerminal: RiskHigh, ActionOther: RiskHigh,
		"": RiskHigh, "unknown": RiskHigh,
	}
	if len(want) != len(Actions())+2 {
		t.Fatalf("test covers %d actions; Actions() has %d", len(want)-2, len(Actions()))
	}
	for a, r := range want {
		t.Run(string(a), func(t *testing.T) {
			if got := RiskOf(a); got != r {
				t.Errorf("RiskOf(%q) = %q; want %q", a, got, r)
			}
		})
	}
}

func TestParseAction(t *testing.T) {
	for _, a := range Actions() {
		got, err := ParseAction(string(a))
		if err != nil || got != a {
			t.Errorf("ParseAction(%q) = %q, %v; want %q, nil", a, got, err, a)
		}
	}
	for _, s := range []string{"", "READ", "exec", " read", "fs.delete", "full", "unknown"} {
		t.Run(s, func(t *testing.T) {
			got, err := ParseAction(s)
			if !errors.Is(err, ErrUnknownAction) || got != "" {
				t.Fatalf("ParseAction(%q) = %q, %v; want \"\", ErrUnknownAction", s, got, err)
			}
			if !strings.Contains(err.Error(), "switch_mode") || !strings.Contains(err.Error(), "fs.write") {
				t.Errorf("ParseAction(%q) error = %q; want the valid names listed", s, err)
			}
		})
	}
}

func TestParseDecision(t *testing.T) {
	tests := []struct {
		in      string
		want    Decision
		wantErr bool
	}{
		{"allow", DecisionAllow, false},
		{"ask", DecisionAsk, false},
		{"deny", DecisionDeny, false},
		{"Allow", "", true},
		{"reject", "", true},
		{"", "", true},
		{"full", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDecision(tt.in)
			if got != tt.want || (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrUnknownDecision)) {
				t.Errorf("ParseDecision(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}
