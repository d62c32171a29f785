package permission

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPolicyDecideDefaults(t *testing.T) {
	want := map[Action]Decision{
		ActionRead: DecisionAllow, ActionSearch: DecisionAllow, ActionThink: DecisionAllow,
		ActionEdit: DecisionAsk, ActionMove: DecisionAsk, ActionFetch: DecisionAsk, ActionSwitchMode: DecisionAsk,
		ActionDelete: DecisionAsk, ActionExecute: DecisionAsk, ActionOther: DecisionAsk,
		ActionFSRead: DecisionAllow, ActionFSWrite: DecisionAllow, ActionTerminal: DecisionAllow,
		"unknown": DecisionAsk,
	}
	for a, d := range want {
		t.Run(string(a), func(t *testing.T) {
			if got := (Policy{}).Decide(a); got != d {
				t.Errorf("Policy{}.Decide(%q) = %q; want %q", a, got, d)
			}
			if got := DefaultDecision(a); got != d {
				t.Errorf("DefaultDecision(%q) = %q; want %q", a, got, d)
			}
		})
	}
}

func TestPolicyDecide(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		action Action
		want   Decision
	}{
		{"full allows high risk", Policy{Full: true}, ActionExecute, DecisionAllow},
		{"full allows unknown", Policy{Full: true}, "unknown", DecisionAllow},
		{"rule beats full", Policy{Full: true, Rules: map[Action]Decision{ActionDelete: DecisionDeny}}, ActionDelete, DecisionDeny},
		{"ask rule beats full", Policy{Full: true, Rules: map[Action]Decision{ActionEdit: DecisionAsk}}, ActionEdit, DecisionAsk},
		{"rule allows high", Policy{Rules: map[Action]Decision{ActionExecute: DecisionAllow}}, ActionExecute, DecisionAllow},
		{"rule asks low", Policy{Rules: map[Action]Decision{ActionRead: DecisionAsk}}, ActionRead, DecisionAsk},
		{"rule denies low", Policy{Rules: map[Action]Decision{ActionRead: DecisionDeny}}, ActionRead, DecisionDeny},
		{"bridge overridden", Policy{Rules: map[Action]Decision{ActionTerminal: DecisionAsk}}, ActionTerminal, DecisionAsk},
		{"bridge denied", Policy{Rules: map[Action]Decision{ActionFSWrite: DecisionDeny}}, ActionFSWrite, DecisionDeny},
		{"other rules leave default", Policy{Rules: map[Action]Decision{ActionExecute: DecisionDeny}}, ActionRead, DecisionAllow},
		{"invalid rule value asks", Policy{Rules: map[Action]Decision{ActionRead: "yes"}}, ActionRead, DecisionAsk},
		{"invalid rule value asks in full", Policy{Full: true, Rules: map[Action]Decision{ActionRead: ""}}, ActionRead, DecisionAsk},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.policy.Decide(tt.action); got != tt.want {
				t.Errorf("%+v.Decide(%q) = %q; want %q", tt.policy, tt.action, got, tt.want)
			}
		})
	}
}

func TestPolicyFrom(t *testing.T) {
	tests := []struct {
		name  string
		rules map[string]string
		mode  string
		want  Policy
	}{
		{"empty", nil, "", Policy{}},
		{"default mode", map[string]string{}, "default", Policy{}},
		{"full", nil, "full", Policy{Full: true}},
		{"rules", map[string]string{"edit": "allow", "execute": "deny", "fs.write": "ask"}, "",
			Policy{Rules: map[Action]Decision{ActionEdit: DecisionAllow, ActionExecute: DecisionDeny, ActionFSWrite: DecisionAsk}}},
		{"rules and full", map[string]string{"delete": "deny"}, "full",
			Policy{Full: true, Rules: map[Action]Decision{ActionDelete: DecisionDeny}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PolicyFrom(tt.rules, tt.mode)
			if err != nil {
				t.Fatalf("PolicyFrom(%v, %q) error = %v; want nil", tt.rules, tt.mode, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("PolicyFrom(%v, %q) mismatch (-want +got):\n%s", tt.rules, tt.mode, diff)
			}
		})
	}
}

func TestPolicyFromErrors(t *testing.T) {
	tests := []struct {
		name     string
		rules    map[string]string
		mode     string
		sentinel []error
		mention  []string
	}{
		{"bad key", map[string]string{"exec": "allow"}, "", []error{ErrUnknownAction}, []string{`permissions["exec"]`}},
		{"bad value", map[string]string{"edit": "yes"}, "", []error{ErrUnknownDecision}, []string{`permissions["edit"]`, `"yes"`}},
		{"bad mode", nil, "yolo", []error{ErrUnknownMode}, []string{`mode`, `"yolo"`}},
		{"all reported", map[string]string{"zzz": "allow", "read": "maybe"}, "Full",
			[]error{ErrUnknownAction, ErrUnknownDecision, ErrUnknownMode},
			[]string{`permissions["zzz"]`, `permissions["read"]`, `"maybe"`, `"Full"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PolicyFrom(tt.rules, tt.mode)
			if err == nil {
				t.Fatalf("PolicyFrom(%v, %q) = %+v, nil; want an error", tt.rules, tt.mode, got)
			}
			for _, s := range tt.sentinel {
				if !errors.Is(err, s) {
					t.Errorf("PolicyFrom(%v, %q) error = %v; want it to wrap %v", tt.rules, tt.mode, err, s)
				}
			}
			for _, m := range tt.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("PolicyFrom(%v, %q) error = %q; want it to mention %s", tt.rules, tt.mode, err, m)
				}
			}
			if diff := cmp.Diff(Policy{}, got); diff != "" {
				t.Errorf("PolicyFrom(%v, %q) returned a policy with its error (-want +got):\n%s", tt.rules, tt.mode, diff)
			}
		})
	}
}
