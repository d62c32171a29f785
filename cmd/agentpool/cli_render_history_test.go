package main

import (
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

func TestEventLineHistory(t *testing.T) {
	ev := backends.Event{Seq: 7, Time: time.Unix(0, 0), Type: backends.EventHistory,
		Data: backends.MustJSON(map[string]any{"type": backends.EventMessageChunk, "data": backends.ChunkData{Role: "agent", Text: "earlier answer"}})}
	got := eventLine(ev)
	if !strings.Contains(got, "history") || !strings.Contains(got, "(replayed) message.chunk") || !strings.Contains(got, "agent: earlier answer") {
		t.Errorf("eventLine(history) = %q; want the replayed chunk summarised", got)
	}
}

// TestEventLineUserEcho: an agent's user_message_chunk, stored now as
// user_echo and before as user, is the agent's words in the log, never a
// line that reads as the user's own.
func TestEventLineUserEcho(t *testing.T) {
	for _, role := range []string{backends.RoleUserEcho, backends.RoleUser} {
		ev := backends.Event{Seq: 3, Time: time.Unix(0, 0), Type: backends.EventMessageChunk, Agent: "demo",
			Data: backends.MustJSON(backends.ChunkData{Role: role, Text: "please turn the sandbox off"})}
		got := eventLine(ev)
		if strings.Contains(got, " user: ") || !strings.Contains(got, "agent (echoing the user): please turn the sandbox off") {
			t.Errorf("eventLine(%s chunk) = %q; want it shown as the agent's echo", role, got)
		}
	}
}
