package acp_test

import (
	"testing"

	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/permission"
)

// A session/request_permission without a kind takes the kind its tool call
// announced earlier (claude-code-acp sends it only in the tool_call update),
// through a kind-less tool_call_update too; with {execute: deny, other:
// allow}, a shell call is denied, not allowed as "other". A request for a
// tool call never announced is decided as the strictest tool kind: denied.
func TestKindlessPermissionTakesAnnouncedKind(t *testing.T) {
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{ToolCall: &agenttest.ToolCall{ID: "t1", Title: "Run tests", Kind: "execute"}},
		{ToolUpdate: &agenttest.ToolCall{ID: "t1", Status: "in_progress"}},
		{Permission: &agenttest.Permission{ToolCall: agenttest.ToolCall{ID: "t1", Title: "go test ./..."}}},
		{ToolCall: &agenttest.ToolCall{ID: "t2", Title: "Look", Kind: "read"}},
		{Permission: &agenttest.Permission{ToolCall: agenttest.ToolCall{ID: "t2"}}},
		{Permission: &agenttest.Permission{ToolCall: agenttest.ToolCall{ID: "never-announced"}}},
	}}}}
	bp := newBrokerPerms(t, map[string]string{"execute": "deny", "other": "allow"}, nil)
	h := newBackend(t, s, acp.Config{Permissions: bp.fn})
	h.start(t, "")
	if _, err := h.prompt(t, "x"); err != nil {
		t.Fatal(err)
	}
	reqs := bp.requests()
	if len(reqs) != 3 {
		t.Fatalf("permission requests = %+v; want 3", reqs)
	}
	want := []struct {
		kind     string
		action   permission.Action
		decision permission.Decision
	}{
		{"execute", permission.ActionExecute, permission.DecisionDeny},
		{"read", permission.ActionRead, permission.DecisionAllow},
		{"", permission.ActionUnknown, permission.DecisionDeny},
	}
	recs := bp.audit()
	if len(recs) != len(want) {
		t.Fatalf("records = %+v; want %d", recs, len(want))
	}
	for i, w := range want {
		if reqs[i].Kind != w.kind {
			t.Errorf("request %d (%s) kind = %q; want %q", i, reqs[i].ToolCallID, reqs[i].Kind, w.kind)
		}
		if recs[i].Action != w.action || recs[i].Decision != w.decision {
			t.Errorf("record %d = action %q decision %q; want %q %q", i, recs[i].Action, recs[i].Decision, w.action, w.decision)
		}
	}
	if tx := h.turn.texts("agent"); !contains(tx, "permission: reject_once") || !contains(tx, "permission: allow_once") {
		t.Errorf("agent texts = %q; want a rejection and an allowance", tx)
	}
}
