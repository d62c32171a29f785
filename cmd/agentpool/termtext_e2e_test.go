package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"
)

// TestEventsOnTerminalEscapesAgentText: an agent whose words carry a
// clipboard write, a window title, hidden text and a line overwrite
// cannot drive the user's terminal through `agentpool events`: run on a
// real terminal, it prints no ESC or BEL, and shows the sequences escaped.
func TestEventsOnTerminalEscapesAgentText(t *testing.T) {
	bin := agentpoolBinary(t)
	home := t.TempDir()
	evil := "hello" + seqClipboard + seqTitle + seqHidden + "hidden" + seqOverwrite + "over\n"
	script := map[string]any{"agent_name": "sly", "turns": []any{map[string]any{"steps": []any{
		map[string]any{"thought": evil},
		map[string]any{"tool_call": map[string]any{"id": "t1", "title": "Read" + seqOverwrite + "x", "kind": "read", "status": "completed"}},
		map[string]any{"chunk": evil},
	}}}}
	writeScripted(t, home, bin, map[string]any{"sly": script})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# sly\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "sly", "--json")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	var s struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &s); err != nil {
		t.Fatalf("session new --json printed %q: %v", out, err)
	}
	if out, err := d.cli("prompt", s.ID, "say it"); err != nil {
		t.Fatalf("prompt: %v\n%s", err, out)
	} else if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("prompt printed a control sequence of the agent's: %q", out)
	}
	cmd := exec.Command(bin, "events", s.ID)
	cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home)
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var got bytes.Buffer
	_, _ = io.Copy(&got, tty) // until the command ends (EIO)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("events: %v\n%s", err, got.String())
	}
	if !strings.Contains(got.String(), "message.chunk") {
		t.Fatalf("events printed no message: %q", got.String())
	}
	if bytes.ContainsAny(got.Bytes(), "\x1b\x07") {
		t.Errorf("events on a terminal printed a control sequence of the agent's:\n%q", got.String())
	}
	if !strings.Contains(got.String(), "^[]52;c;") || !strings.Contains(got.String(), "^[[8mhidden") {
		t.Errorf("events does not show the sequences escaped:\n%s", got.String())
	}
}
