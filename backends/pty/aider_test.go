package pty_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/pty"
)

// The built-in aider provider's terminal settings (registry/builtin.go).
const (
	aiderReadyPattern      = `^[\w-]*> $`
	aiderCancelMinInterval = 2 * time.Second
	aiderCancelKeys        = "\x03"
)

var aiderIgnore = []string{`^Tokens: .* sent`, `^\s*─{3,}\s*$`, `^(Readonly: )?[\w./-]*\w\.\w+( [\w./-]*\w\.\w+)*$`}

func aiderSpec(t *testing.T) backends.Spec {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return backends.Spec{
		Provider: "aider", Kind: backends.KindPTY, Path: exe, Dir: t.TempDir(),
		Env: []string{envFakeAider + "=1", "GORACE=atexit_sleep_ms=0"},
		PTY: backends.PTYSpec{ReadyPattern: aiderReadyPattern, CancelKeys: aiderCancelKeys,
			CancelMinInterval: aiderCancelMinInterval, IgnorePatterns: aiderIgnore, Cols: 100, Rows: 40},
	}
}

// TestAiderTurnWithoutChrome checks the reply of an aider turn: the answer
// and the edit, without the token line, the rule and the file list.
func TestAiderTurnWithoutChrome(t *testing.T) {
	h := newHarness(t, pty.Config{Spec: aiderSpec(t)})
	h.start(t, "")
	res, err := h.prompt(t, "make it print goodbye")
	if err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt() = %+v, %v; want end_turn", res, err)
	}
	// The blank rows match blank rows of the screen before; the file
	// name above the edit block looks like the file list and goes too.
	want := "I'll change the greeting for \"make it print goodbye\".\n" +
		"```python\n<<<<<<< SEARCH\nprint(\"hello\")\n=======\nprint(\"goodbye\")\n>>>>>>> REPLACE\n```\n" +
		"Applied edit to hello.py\nCommit 1a2b3c4 fix: print goodbye"
	if got := h.turn.chunks(); len(got) != 1 || got[0] != want {
		t.Errorf("chunks = %q; want [%q]", got, want)
	}
}

// TestCancelMinInterval cancels two turns 250 ms apart: aider exits on a
// second Ctrl-C within 2 s, so the second cancel must wait, and aider must
// still run after both.
func TestCancelMinInterval(t *testing.T) {
	h := newHarness(t, pty.Config{Spec: aiderSpec(t), CancelGrace: 5 * time.Second})
	h.start(t, "")
	var sent []time.Time
	for i := range 2 {
		done := make(chan struct{})
		var res backends.TurnResult
		var err error
		go func() {
			defer close(done)
			res, err = h.prompt(t, "slow work")
		}()
		waitScreen(t, h.b, "Waiting for mock")
		sent = append(sent, time.Now())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if cerr := h.b.Cancel(ctx); cerr != nil {
			t.Fatalf("Cancel() %d = %v", i+1, cerr)
		}
		cancel()
		<-done
		if err != nil || res.StopReason != backends.StopCancelled {
			t.Fatalf("cancelled turn %d = %+v, %v; want cancelled", i+1, res, err)
		}
		if i == 1 {
			if took := time.Since(sent[0]); took < aiderCancelMinInterval {
				t.Errorf("second cancel ended %v after the first; want it held back %v", took, aiderCancelMinInterval)
			}
		}
	}
	select {
	case <-h.b.Done():
		t.Fatalf("aider exited after two cancels: %v", h.b.Err())
	case <-time.After(300 * time.Millisecond):
	}
	if res, err := h.prompt(t, "still there"); err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt() after the cancels = %+v, %v; want end_turn", res, err)
	}
}

// TestCancelWithoutMinIntervalKillsAider shows why the interval exists:
// without it, two quick cancels end aider.
func TestCancelWithoutMinIntervalKillsAider(t *testing.T) {
	spec := aiderSpec(t)
	spec.PTY.CancelMinInterval = 0
	h := newHarness(t, pty.Config{Spec: spec, CancelGrace: 2 * time.Second})
	h.start(t, "")
	for range 2 {
		done := make(chan struct{})
		go func() { defer close(done); _, _ = h.prompt(t, "slow work") }()
		waitScreen(t, h.b, "Waiting for mock")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = h.b.Cancel(ctx)
		cancel()
		<-done
		if h.b.Err() != nil {
			break
		}
		select {
		case <-h.b.Done():
		default:
			continue
		}
		break
	}
	select {
	case <-h.b.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("aider stand-in survived two Ctrl-C within 2s; it should exit like aider")
	}
}
