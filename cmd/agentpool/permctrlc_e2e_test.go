package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/agentpool/agentpool/backends"
)

// askingScript is a demo agent whose every turn asks permission to run a
// command, and says "ran it" once allowed.
func askingScript(turns int) map[string]any {
	turn := map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{
			"tool_call": map[string]any{"id": "t1", "title": "Run make", "kind": "execute", "status": "pending"},
			"allowed":   []any{map[string]any{"chunk": "ran it"}},
			"rejected":  []any{map[string]any{"chunk": "did not run it"}},
		}},
	}}
	ts := make([]any, turns)
	for i := range ts {
		ts[i] = turn
	}
	return map[string]any{"agent_name": "asker", "turns": ts}
}

// ptyOutput collects what a command prints on its terminal.
type ptyOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *ptyOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *ptyOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits until the output contains s.
func (o *ptyOutput) waitFor(t *testing.T, s string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(o.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal never showed %q:\n%s", s, o.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPromptCtrlCAtPermissionQuestion: Ctrl-C typed at the permission
// question of `agentpool prompt` on a terminal cancels the turn and ends
// the command at once, without waiting for Enter.
func TestPromptCtrlCAtPermissionQuestion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"asker": askingScript(1)})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# asker\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	session := d.newSessionWith(repo, "asker")

	cmd := exec.Command(bin, "prompt", session, "build it")
	cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home)
	out := ctrlCAtQuestion(t, cmd, "prompt")
	if !strings.Contains(out.String(), "cancelling turn 1") {
		t.Errorf("prompt did not say it cancels the turn:\n%s", out)
	}
	ended := d.waitEvent(session, backends.EventTurnEnded)
	if got := decodeData(ended).StopReason; got != "cancelled" {
		t.Errorf("turn.ended stop reason = %q; want cancelled", got)
	}
	turn, err := d.client.Turn(context.Background(), session, 1, false)
	if err != nil || turn.EndedAt == nil || turn.StopReason != "cancelled" {
		t.Errorf("turn 1 = %+v, %v; want it ended cancelled", turn, err)
	}
}

// copyAll copies a terminal's output into w until it ends (EIO once the
// command has exited).
func copyAll(w *ptyOutput, r *os.File) (int64, error) {
	var n int64
	buf := make([]byte, 4096)
	for {
		k, err := r.Read(buf)
		if k > 0 {
			_, _ = w.Write(buf[:k])
			n += int64(k)
		}
		if err != nil {
			return n, err
		}
	}
}

// newSessionWith runs `agentpool session new` on repo with agent and
// returns the id.
func (d *daemon) newSessionWith(repo, agent string) string {
	d.t.Helper()
	out, err := d.cli("session", "new", "--repo", repo, "--agent", agent)
	if err != nil {
		d.t.Fatalf("session new: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`session (\S+) created`).FindStringSubmatch(out)
	if m == nil {
		d.t.Fatalf("session new output has no id:\n%s", out)
	}
	return m[1]
}

// ctrlCAtQuestion runs cmd (what, in messages) on a pty until it asks a
// permission question, types Ctrl-C there, and checks that it ends at once
// with a failure status; it returns what cmd printed.
func ctrlCAtQuestion(t *testing.T, cmd *exec.Cmd, what string) *ptyOutput {
	t.Helper()
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	out := &ptyOutput{}
	copied := make(chan struct{})
	go func() { _, _ = copyAll(out, tty); close(copied) }()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	out.waitFor(t, "Reject [N]:", 30*time.Second)

	if _, err := tty.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	sent := time.Now()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("%s interrupted at the question exited 0; want a failure status\n%s", what, out)
		}
		if took := time.Since(sent); took > 2*time.Second {
			t.Errorf("%s ended %s after Ctrl-C; want at once", what, took)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("%s still runs 10 s after Ctrl-C at the permission question:\n%s", what, out)
	}
	// The command has ended, but what it printed last may still sit in
	// the terminal: read to its end (EIO) before anyone looks at it.
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s ended but its terminal did not close in 10 s:\n%s", what, out)
	}
	return out
}
