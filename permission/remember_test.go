package permission

import (
	"context"
	"testing"
)

// TestRejectAlwaysRemembered: a person's reject_always is remembered for
// the (session, agent, action) like allow_always, and rejects the later
// requests without asking.
func TestRejectAlwaysRemembered(t *testing.T) {
	h := newHarness(t, Config{})
	req := Request{Session: "s1", Agent: "claude", ToolKind: "delete", Options: agentOptions()}
	c, p := h.ask(t, req)
	if err := h.b.Answer("s1", p.ID, KindRejectAlways); err != nil {
		t.Fatalf("Answer(s1, %q, reject_always) error = %v; want nil", p.ID, err)
	}
	c.wait(t)
	rs := h.recordsOf(p.ID)
	if len(rs) != 1 {
		t.Fatalf("records of %q = %+v; want one", p.ID, rs)
	}
	if got, ok := rs[0].Remembered(); !ok || got != (Remembered{Agent: "claude", Action: ActionDelete, Kind: KindRejectAlways}) {
		t.Errorf("Record.Remembered() = %+v, %v; want claude's delete rejected always", got, ok)
	}
	ended, end := context.WithCancel(context.Background())
	end()
	got, err := h.b.Request(ended, req)
	if err != nil || got.DecidedBy != DecidedByRemembered || got.Decision != DecisionDeny || got.Cancelled {
		t.Errorf("repeated request = %+v, %v; want a rejection decided by remembered", got, err)
	}
}

// TestRememberRestores: answers given back with Remember (as the pool
// does when it loads a session from its store) decide the session's
// requests as if the person had just given them, and replace what the
// broker remembered of that session.
func TestRememberRestores(t *testing.T) {
	h := newHarness(t, Config{})
	ended, end := context.WithCancel(context.Background())
	end()
	req := func(agent, kind string) Request {
		return Request{Session: "s1", Agent: agent, ToolKind: kind, Options: agentOptions()}
	}
	h.b.Remember("s1", []Remembered{
		{Agent: "claude", Action: ActionExecute, Kind: KindAllowAlways},
		{Agent: "claude", Action: ActionDelete, Kind: KindRejectAlways},
		{Agent: "claude", Action: ActionEdit, Kind: KindAllowOnce},      // not an "always": ignored
		{Agent: "claude", Action: ActionUnknown, Kind: KindAllowAlways}, // never remembered
	})
	for _, tt := range []struct {
		agent, kind string
		by          string
		decision    Decision
	}{
		{"claude", "execute", DecidedByRemembered, DecisionAllow},
		{"claude", "delete", DecidedByRemembered, DecisionDeny},
		{"claude", "edit", DecidedByCancel, DecisionDeny},
		{"claude", "", DecidedByCancel, DecisionDeny},
		{"gemini", "execute", DecidedByCancel, DecisionDeny},
	} {
		got, err := h.b.Request(ended, req(tt.agent, tt.kind))
		if err != nil || got.DecidedBy != tt.by || got.Decision != tt.decision {
			t.Errorf("Request(%s, %q) = %+v, %v; want %s decided by %s", tt.agent, tt.kind, got, err, tt.decision, tt.by)
		}
	}
	h.b.Remember("s1", nil)
	if got, _ := h.b.Request(ended, req("claude", "execute")); got.DecidedBy != DecidedByCancel {
		t.Errorf("after Remember(s1, nil), Request = %+v; want it to ask (cancelled by the ended context)", got)
	}
}

// TestRecordRemembered: only a person's "always" answer to a known action
// is one to remember.
func TestRecordRemembered(t *testing.T) {
	for _, tt := range []struct {
		name string
		r    Record
		want bool
	}{
		{"allow_always by user", Record{DecidedBy: DecidedByUser, OptionKind: KindAllowAlways, Action: ActionExecute}, true},
		{"reject_always by user", Record{DecidedBy: DecidedByUser, OptionKind: KindRejectAlways, Action: ActionExecute}, true},
		{"allow_once by user", Record{DecidedBy: DecidedByUser, OptionKind: KindAllowOnce, Action: ActionExecute}, false},
		{"remembered", Record{DecidedBy: DecidedByRemembered, OptionKind: KindAllowAlways, Action: ActionExecute}, false},
		{"policy", Record{DecidedBy: DecidedByPolicy, OptionKind: KindAllowAlways, Action: ActionExecute}, false},
		{"unknown action", Record{DecidedBy: DecidedByUser, OptionKind: KindAllowAlways, Action: ActionUnknown}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, got := tt.r.Remembered(); got != tt.want {
				t.Errorf("Record%+v.Remembered() ok = %v; want %v", tt.r, got, tt.want)
			}
		})
	}
}
