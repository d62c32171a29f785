package permission

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestRequestDecidedWithoutAsking covers every path that answers at once.
func TestRequestDecidedWithoutAsking(t *testing.T) {
	deny := func(a Action) Policy { return Policy{Rules: map[Action]Decision{a: DecisionDeny}} }
	tests := []struct {
		name     string
		req      Request
		want     Outcome
		noteHas  string
		wantRisk Risk
	}{
		{"low risk allowed by default picks allow_once",
			Request{ToolKind: "read", Options: agentOptions()},
			Outcome{OptionID: "proceed_once", OptionKind: KindAllowOnce, Decision: DecisionAllow, DecidedBy: DecidedByPolicy}, "", RiskLow},
		{"allow falls back to allow_always",
			Request{ToolKind: "search", Options: onlyKinds(KindAllowAlways, KindRejectOnce)},
			Outcome{OptionID: "proceed_always", OptionKind: KindAllowAlways, Decision: DecisionAllow, DecidedBy: DecidedByPolicy}, "", RiskLow},
		{"deny picks reject_once by kind, not by id",
			Request{ToolKind: "execute", Options: agentOptions(), Policy: deny(ActionExecute)},
			Outcome{OptionID: "allow_once", OptionKind: KindRejectOnce, Decision: DecisionDeny, DecidedBy: DecidedByPolicy}, "", RiskHigh},
		{"deny falls back to reject_always",
			Request{ToolKind: "delete", Options: onlyKinds(KindAllowOnce, KindRejectAlways), Policy: deny(ActionDelete)},
			Outcome{OptionID: "reject_once", OptionKind: KindRejectAlways, Decision: DecisionDeny, DecidedBy: DecidedByPolicy}, "", RiskHigh},
		{"allow without an allow option is cancelled",
			Request{ToolKind: "think", Options: onlyKinds(KindRejectOnce, KindRejectAlways)},
			Outcome{Cancelled: true, Decision: DecisionDeny, DecidedBy: DecidedByPolicy}, "no allow_once or allow_always option", RiskLow},
		{"deny without a reject option is cancelled",
			Request{ToolKind: "fetch", Options: onlyKinds(KindAllowOnce), Policy: deny(ActionFetch)},
			Outcome{Cancelled: true, Decision: DecisionDeny, DecidedBy: DecidedByPolicy}, "no reject_once or reject_always option", RiskMedium},
		{"zero options is cancelled",
			Request{ToolKind: "read"},
			Outcome{Cancelled: true, Decision: DecisionDeny, DecidedBy: DecidedByPolicy}, "no options", RiskLow},
		{"full mode allows execute",
			Request{ToolKind: "execute", Options: agentOptions(), Policy: Policy{Full: true}},
			Outcome{OptionID: "proceed_once", OptionKind: KindAllowOnce, Decision: DecisionAllow, DecidedBy: DecidedByPolicy}, "", RiskHigh},
		{"full mode keeps an explicit deny",
			Request{ToolKind: "delete", Options: agentOptions(), Policy: Policy{Full: true, Rules: map[Action]Decision{ActionDelete: DecisionDeny}}},
			Outcome{OptionID: "allow_once", OptionKind: KindRejectOnce, Decision: DecisionDeny, DecidedBy: DecidedByPolicy}, "", RiskHigh},
		{"rule allows medium risk",
			Request{ToolKind: "edit", Options: agentOptions(), Policy: Policy{Rules: map[Action]Decision{ActionEdit: DecisionAllow}}},
			Outcome{OptionID: "proceed_once", OptionKind: KindAllowOnce, Decision: DecisionAllow, DecidedBy: DecidedByPolicy}, "", RiskMedium},
		{"bridge write allowed by default",
			Request{Action: ActionFSWrite, Options: BridgeOptions()},
			Outcome{OptionID: KindAllowOnce, OptionKind: KindAllowOnce, Decision: DecisionAllow, DecidedBy: DecidedByPolicy}, "", RiskMedium},
		{"bridge terminal allowed by default",
			Request{Action: ActionTerminal, Options: BridgeOptions()},
			Outcome{OptionID: KindAllowOnce, OptionKind: KindAllowOnce, Decision: DecisionAllow, DecidedBy: DecidedByPolicy}, "", RiskHigh},
		{"bridge read denied by rule",
			Request{Action: ActionFSRead, Options: BridgeOptions(), Policy: deny(ActionFSRead)},
			Outcome{OptionID: KindRejectOnce, OptionKind: KindRejectOnce, Decision: DecisionDeny, DecidedBy: DecidedByPolicy}, "", RiskLow},
		{"explicit action wins over tool kind",
			Request{Action: ActionRead, ToolKind: "execute", Options: agentOptions()},
			Outcome{OptionID: "proceed_once", OptionKind: KindAllowOnce, Decision: DecisionAllow, DecidedBy: DecidedByPolicy}, "", RiskLow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			tt.req.Session, tt.req.Agent, tt.req.Turn, tt.req.Title = "s1", "claude", 7, "do it"
			got, err := h.b.Request(context.Background(), tt.req)
			if err != nil {
				t.Fatalf("Request(%+v) error = %v; want nil", tt.req, err)
			}
			want := tt.want
			want.RequestID = "req-1"
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Outcome{}, "Note")); diff != "" {
				t.Errorf("Request(%+v) mismatch (-want +got):\n%s", tt.req, diff)
			}
			if !strings.Contains(got.Note, tt.noteHas) || (tt.noteHas == "" && got.Note != "") {
				t.Errorf("Request(%+v).Note = %q; want it to contain %q", tt.req, got.Note, tt.noteHas)
			}
			select {
			case p := <-h.requested:
				t.Errorf("Request(%+v) asked (%+v); want a decision without asking", tt.req, p)
			default:
			}
			wantReq := tt.req
			if wantReq.Action == "" {
				wantReq.Action = ActionFromToolKind(wantReq.ToolKind)
			}
			now := h.clock.Now()
			wantRec := []Record{{
				ID: "req-1", Session: "s1", Agent: "claude", Turn: 7, Action: wantReq.Action, Risk: tt.wantRisk,
				Request: wantReq, Decision: want.Decision, DecidedBy: want.DecidedBy,
				OptionKind: want.OptionKind, OptionID: want.OptionID, Cancelled: want.Cancelled, Note: got.Note,
				RequestedAt: now, DecidedAt: now,
			}}
			if diff := cmp.Diff(wantRec, h.recordsOf("req-1")); diff != "" {
				t.Errorf("records mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRequestAskAnswered covers every way a person can answer.
func TestRequestAskAnswered(t *testing.T) {
	tests := []struct {
		choice string
		want   Option
	}{
		{"allow_once", Option{ID: "proceed_once", Kind: KindAllowOnce}},
		{"allow_always", Option{ID: "proceed_always", Kind: KindAllowAlways}},
		{"reject_once", Option{ID: "allow_once", Kind: KindRejectOnce}},
		{"reject_always", Option{ID: "reject_once", Kind: KindRejectAlways}},
		{"allow", Option{ID: "proceed_once", Kind: KindAllowOnce}},
		{"deny", Option{ID: "allow_once", Kind: KindRejectOnce}},
		{"reject", Option{ID: "allow_once", Kind: KindRejectOnce}},
		{"proceed_always", Option{ID: "proceed_always", Kind: KindAllowAlways}},
		{"proceed_once", Option{ID: "proceed_once", Kind: KindAllowOnce}},
	}
	for _, tt := range tests {
		t.Run(tt.choice, func(t *testing.T) {
			h := newHarness(t, Config{})
			req := Request{Session: "s1", Agent: "qwen", Turn: 3, ToolCallID: "tc-9", Title: "Edit main.go",
				ToolKind: "edit", Locations: []string{"main.go"}, RawInput: json.RawMessage(`{"path":"main.go"}`),
				Options: agentOptions()}
			start := h.clock.Now()
			c, p := h.ask(t, req)
			wantReq := req
			wantReq.Action = ActionEdit
			wantPending := Pending{ID: "req-1", Request: wantReq, Risk: RiskMedium, RequestedAt: start, Deadline: start.Add(DefaultTimeout)}
			if diff := cmp.Diff(wantPending, p); diff != "" {
				t.Fatalf("OnRequested mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]Pending{wantPending}, h.b.Pending("s1")); diff != "" {
				t.Errorf("Pending(s1) mismatch (-want +got):\n%s", diff)
			}
			h.clock.Advance(DefaultTimeout / 2)
			if err := h.b.Answer("s1", p.ID, tt.choice); err != nil {
				t.Fatalf("Answer(s1, %q, %q) error = %v; want nil", p.ID, tt.choice, err)
			}
			got := c.wait(t)
			d, _ := decisionOfKind(tt.want.Kind)
			want := Outcome{RequestID: "req-1", OptionID: tt.want.ID, OptionKind: tt.want.Kind, Decision: d, DecidedBy: DecidedByUser}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Request outcome mismatch (-want +got):\n%s", diff)
			}
			wantRec := []Record{{
				ID: "req-1", Session: "s1", Agent: "qwen", Turn: 3, Action: ActionEdit, Risk: RiskMedium, Request: wantReq,
				Decision: d, DecidedBy: DecidedByUser, OptionKind: tt.want.Kind, OptionID: tt.want.ID,
				RequestedAt: start, DecidedAt: start.Add(DefaultTimeout / 2),
			}}
			if diff := cmp.Diff(wantRec, h.recordsOf("req-1")); diff != "" {
				t.Errorf("records mismatch (-want +got):\n%s", diff)
			}
			if ps := h.b.Pending(""); len(ps) != 0 {
				t.Errorf("Pending(\"\") = %+v after the answer; want none", ps)
			}
		})
	}
}

func TestAnswerInvalidChoice(t *testing.T) {
	tests := []struct {
		name    string
		options []Option
		choice  string
	}{
		{"empty", agentOptions(), ""},
		{"unknown word", agentOptions(), "maybe"},
		{"kind in other case", agentOptions(), "Allow_Once"},
		{"kind not offered", onlyKinds(KindAllowOnce, KindRejectOnce), "allow_always"},
		{"allow with no allow option", onlyKinds(KindRejectOnce), "allow"},
		{"deny with no reject option", onlyKinds(KindAllowOnce), "deny"},
		{"id of an option of unknown kind", append(agentOptions(), Option{ID: "later", Kind: "defer"}), "later"},
		{"id not offered", agentOptions(), "approved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			c, p := h.ask(t, Request{Session: "s1", Agent: "a", ToolKind: "execute", Options: tt.options})
			err := h.b.Answer("s1", p.ID, tt.choice)
			if !errorsIs(err, ErrInvalidChoice) {
				t.Fatalf("Answer(s1, %q, %q) error = %v; want ErrInvalidChoice", p.ID, tt.choice, err)
			}
			if ps := h.b.Pending("s1"); len(ps) != 1 || !c.running() {
				t.Fatalf("after an invalid choice Pending(s1) = %+v, running = %v; want the request still pending", ps, c.running())
			}
			// Answer by kind: the first option's id is itself the name of
			// another kind, and a kind always wins over an id.
			if err := h.b.Answer("s1", p.ID, tt.options[0].Kind); err != nil {
				t.Fatalf("Answer(s1, %q, %q) error = %v; want nil", p.ID, tt.options[0].Kind, err)
			}
			if got := c.wait(t); got.DecidedBy != DecidedByUser || got.OptionID != tt.options[0].ID {
				t.Errorf("Request outcome = %+v; want option %q decided by user", got, tt.options[0].ID)
			}
		})
	}
}

func TestAnswerUnknownRequest(t *testing.T) {
	h := newHarness(t, Config{})
	c, p := h.ask(t, Request{Session: "s1", Agent: "a", ToolKind: "execute", Options: agentOptions()})
	for _, tt := range []struct{ name, session, id string }{
		{"unknown id", "s1", "req-404"},
		{"other session", "s2", p.ID},
		{"empty session", "", p.ID},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := h.b.Answer(tt.session, tt.id, "allow_once"); !errorsIs(err, ErrUnknownRequest) {
				t.Errorf("Answer(%q, %q, allow_once) error = %v; want ErrUnknownRequest", tt.session, tt.id, err)
			}
		})
	}
	if !c.running() {
		t.Fatalf("request resolved by a refused Answer")
	}
	if err := h.b.Answer("s1", p.ID, "deny"); err != nil {
		t.Fatalf("Answer(s1, %q, deny) error = %v; want nil", p.ID, err)
	}
	c.wait(t)
	if err := h.b.Answer("s1", p.ID, "allow"); !errorsIs(err, ErrUnknownRequest) {
		t.Errorf("second Answer(s1, %q, allow) error = %v; want ErrUnknownRequest", p.ID, err)
	}
	if rs := h.recordsOf(p.ID); len(rs) != 1 || rs[0].Decision != DecisionDeny {
		t.Errorf("records of %q = %+v; want one deny", p.ID, rs)
	}
}

// TestAnswerFromOnRequested answers synchronously inside the callback: the
// request must already be pending when OnRequested runs.
func TestAnswerFromOnRequested(t *testing.T) {
	var b *Broker
	b = NewBroker(Config{
		Logger: slog.New(slog.DiscardHandler),
		OnRequested: func(p Pending) {
			if err := b.Answer(p.Request.Session, p.ID, KindRejectAlways); err != nil {
				t.Errorf("Answer inside OnRequested error = %v; want nil", err)
			}
		},
	})
	defer b.Close()
	got, err := b.Request(context.Background(), Request{Session: "s", Agent: "a", ToolKind: "delete", Options: agentOptions()})
	if err != nil || got.OptionKind != KindRejectAlways || got.DecidedBy != DecidedByUser || got.Decision != DecisionDeny {
		t.Errorf("Request = %+v, %v; want reject_always by user", got, err)
	}
	if len(got.RequestID) != 26 {
		t.Errorf("default request id %q has %d characters; want 26", got.RequestID, len(got.RequestID))
	}
}
