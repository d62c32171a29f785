package acp_test

import (
	"context"
	"testing"
	"time"

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

// An agent that writes updates faster than they are delivered is held back
// by its own stdout pipe, not stopped: every update arrives, in order, and
// the backend takes the next prompt.
func TestFloodWithSlowDeliveryKeepsEverything(t *testing.T) {
	const chunks = 5000
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: chunks}}}, {Steps: []agenttest.Step{{Chunk: "after"}}}}}
	h := newBackend(t, s, acp.Config{})
	h.start(t, "")
	n := 0
	slow := func(ev backends.Event) {
		if ev.Type == backends.EventMessageChunk {
			n++
			if n%64 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := h.b.Prompt(ctx, backends.Prompt{Text: "flood", Turn: 1}, slow)
	if err != nil || res.StopReason != backends.StopEndTurn || n != chunks {
		t.Fatalf("Prompt(flood) = %+v, %v with %d chunks delivered; want end_turn and %d", res, err, n, chunks)
	}
	if _, err := h.prompt(t, "next"); err != nil {
		t.Fatalf("Prompt(next) after the flood: %v", err)
	}
}
