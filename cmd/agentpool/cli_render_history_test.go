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
