package main

import (
	"bytes"
	"testing"

	"github.com/agentpool/agentpool/backends"
)

// A tool.update whose tool.call the renderer did not see still names the
// call: by the title it carries, else by its id, never as a bare mark.
func TestRendererToolUpdateWithoutItsCall(t *testing.T) {
	var out bytes.Buffer
	r := newRenderer(&out, &out, false)
	update := func(data map[string]any) {
		r.event(backends.Event{Type: backends.EventToolUpdate, Data: backends.MustJSON(data)})
	}
	update(map[string]any{"toolCallId": "read-1", "status": "completed"})
	update(map[string]any{"toolCallId": "edit-1", "title": "Write notes.md", "status": "in_progress"})
	update(map[string]any{"toolCallId": "edit-1", "status": "failed"})
	want := "  ✓ read-1\n  ✗ Write notes.md failed\n"
	if got := out.String(); got != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", got, want)
	}
}
