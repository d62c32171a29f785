package acp_test

import (
	"context"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// A request the agent sends after some updates is handled only once those
// updates have been delivered, so the event stream reads in the agent's order
// although the SDK runs requests concurrently with notifications.
func TestRequestsFollowEarlierUpdates(t *testing.T) {
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{ToolCall: &agenttest.ToolCall{ID: "t1", Title: "Read", Kind: "read"}},
		{Chunks: 200},
		{ToolUpdate: &agenttest.ToolCall{ID: "t1", Status: "completed"}},
		{Permission: &agenttest.Permission{ToolCall: agenttest.ToolCall{ID: "t2", Title: "Edit", Kind: "edit"}}},
	}}}}
	var h *harness
	seen := -1
	perm := func(_ context.Context, req acp.PermissionRequest) (acp.PermissionOutcome, error) {
		seen = len(h.turn.all())
		return acp.PermissionOutcome{Cancelled: true}, nil
	}
	h = newBackend(t, s, acp.Config{Permissions: perm})
	h.start(t, "")
	if _, err := h.prompt(t, "x"); err != nil {
		t.Fatal(err)
	}
	// tool.call + 200 chunks + tool.update were all delivered first.
	if seen != 202 {
		t.Fatalf("events delivered when the permission request was handled = %d; want 202", seen)
	}
	if last := h.turn.all()[201]; last.Type != backends.EventToolUpdate {
		t.Fatalf("event 202 = %s; want tool.update", last.Type)
	}
}
