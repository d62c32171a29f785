package pool_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
)

// A terminal program (bash) as a PTY provider behaves like an ACP agent
// through the pool: warm across turns, its output read as message chunks.
func TestPTYProviderThroughPool(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	shell := map[string]any{
		"extends":       "pty",
		"command":       []string{bash, "--norc", "--noprofile", "-i"},
		"env":           map[string]string{"PS1": "agentpool$ ", "HISTFILE": ""},
		"ready_pattern": `^agentpool\$ $`,
	}
	e := newEnv(t, map[string]any{"shell": shell}, nil)
	s := e.session("shell")
	for _, word := range []string{"first-turn", "second-turn"} {
		tn := e.prompt(s.ID, "", "echo "+word+"-$((40+2))")
		if tn.StopReason != "end_turn" {
			t.Fatalf("turn = %+v", tn)
		}
	}
	if n := e.p.Stats().Spawns; n != 1 {
		t.Errorf("spawns = %d; want 1 (warm across turns)", n)
	}
	var text strings.Builder
	for _, ev := range e.events(s.ID) {
		if ev.Type == backends.EventMessageChunk {
			var c backends.ChunkData
			_ = json.Unmarshal(ev.Data, &c)
			text.WriteString(c.Text)
		}
	}
	for _, want := range []string{"first-turn-42", "second-turn-42"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("chunks %q lack %q", text.String(), want)
		}
	}
}
