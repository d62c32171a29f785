package pty_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/pty"
)

// replaySpec runs the test binary as a replay of the recording with the
// claude-cli provider's settings.
func replaySpec(t *testing.T, recording string) backends.Spec {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path, err := filepath.Abs(filepath.Join("testdata", "recordings", recording))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := pty.LoadRecording(path)
	if err != nil {
		t.Fatal(err)
	}
	return backends.Spec{
		Provider: "claude-cli", Kind: backends.KindPTY, Path: exe, Dir: t.TempDir(),
		Env: []string{envReplay + "=" + path, "GORACE=atexit_sleep_ms=0"},
		PTY: backends.PTYSpec{ReadyPattern: claudeReadyPattern, BusyPattern: claudeBusyPattern,
			CancelKeys: claudeCancelKeys, ClearKeys: claudeClearKeys, IgnorePatterns: claudeIgnore,
			Cols: rec.Cols, Rows: rec.Rows, QuietWindow: 3 * time.Second},
	}
}

// TestClaudeReplay drives the recorded Claude Code 2.1.330 (see
// TestRecordClaude) with the claude-cli settings: the start, a turn, a turn
// with a tool call and a cancel before the first token, which Claude
// honours by putting the prompt back into its input: the clear keys empty
// it and the cancel succeeds.
func TestClaudeReplay(t *testing.T) {
	spec := replaySpec(t, "claude-start-turns-cancel.json")
	h := newHarness(t, pty.Config{Spec: spec, BusyPattern: spec.PTY.BusyPattern, CancelGrace: 5 * time.Second})
	h.start(t, "")
	for _, tt := range []struct{ text, want string }{
		{"say hello", "● Hello from the mock model."},
		// Blank rows that were on the screen before match old blank
		// rows and are not part of the new text.
		{"what do the notes in notes.txt say?", "● Let me read the notes.\n  Read 1 file\n● The notes say: ship on friday."},
	} {
		h.turn.reset()
		res, err := h.prompt(t, tt.text)
		if err != nil || res.StopReason != backends.StopEndTurn {
			t.Fatalf("Prompt(%q) = %+v, %v; want end_turn", tt.text, res, err)
		}
		if got := h.turn.chunks(); len(got) != 1 || got[0] != tt.want {
			t.Errorf("Prompt(%q) chunks = %q; want [%q]\nscreen:\n%s", tt.text, got, tt.want, h.b.Screen())
		}
	}

	h.turn.reset()
	type result struct {
		res backends.TurnResult
		err error
	}
	ch := make(chan result, 1)
	go func() {
		res, err := h.prompt(t, "hold on before answering")
		ch <- result{res, err}
	}()
	waitScreen(t, h.b, "esc to interrupt")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.b.Cancel(ctx); err != nil {
		t.Fatalf("Cancel() = %v", err)
	}
	r := <-ch
	if r.err != nil || r.res.StopReason != backends.StopCancelled {
		t.Fatalf("cancelled Prompt() = %+v, %v; want cancelled (the restored prompt cleared)", r.res, r.err)
	}
	if s := h.b.Screen(); strings.Contains(s, "❯\u00a0hold on") {
		t.Errorf("the restored prompt is still in the input after the cancel:\n%s", s)
	}
	select {
	case <-h.b.Done():
		t.Fatalf("Claude was stopped: %v", h.b.Err())
	default:
	}
}

// TestClaudeReplayContinue starts the recorded restart with --continue,
// whose screen is drawn over the old transcript, and runs a turn.
func TestClaudeReplayContinue(t *testing.T) {
	spec := replaySpec(t, "claude-continue.json")
	h := newHarness(t, pty.Config{Spec: spec, BusyPattern: spec.PTY.BusyPattern})
	h.start(t, "")
	res, err := h.prompt(t, "say hello again")
	if err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt() = %+v, %v; want end_turn", res, err)
	}
	if got := h.turn.chunks(); len(got) != 1 || !strings.HasPrefix(got[0], "● Hello from the mock model.") {
		t.Errorf("chunks = %q; want the answer first\nscreen:\n%s", got, h.b.Screen())
	}
	if got := h.turn.chunks(); len(got) == 1 && strings.Contains(got[0], "say hello again") {
		t.Errorf("chunks = %q; want no echo of the prompt", got)
	}
	_ = errors.New
}
