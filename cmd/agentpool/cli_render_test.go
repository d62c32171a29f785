package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/worktree"
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

// TestTurnSummaryHistory: a turn's end says what became of the agent's
// own commits: taken onto the branch, or refused and why.
func TestTurnSummaryHistory(t *testing.T) {
	taken := turnSummary(eventData{Turn: 1, StopReason: "end_turn", History: &pool.HistoryImport{Commits: 2}})
	if !strings.Contains(taken, "2 commits of the agent's on the branch") {
		t.Errorf("turnSummary with 2 commits taken = %q", taken)
	}
	refused := turnSummary(eventData{Turn: 2, StopReason: "end_turn", History: &pool.HistoryImport{Refused: worktree.RefusedNotFastForward}})
	if !strings.Contains(refused, "agent's commits not taken onto the branch: "+worktree.RefusedNotFastForward) {
		t.Errorf("turnSummary with a refusal = %q", refused)
	}
	if plain := turnSummary(eventData{Turn: 3, StopReason: "end_turn"}); strings.Contains(plain, "commit") {
		t.Errorf("turnSummary without history = %q", plain)
	}
}
