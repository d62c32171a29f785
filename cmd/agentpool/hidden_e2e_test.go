package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
)

// TestHiddenFilesEndToEnd: an agent that writes, with its own system
// calls, a .gitignore of "*" and a file beside it cannot make its turn
// look empty. Through the built binary: the turn's end names the hidden
// file and the rule, the turn's diff lists the .gitignore as added, and
// `agentpool diff --turn 1` says on stderr what the rules hide.
func TestHiddenFilesEndToEnd(t *testing.T) {
	bin := agentpoolBinary(t)
	home := t.TempDir()
	script := map[string]any{"agent_name": "hider", "turns": []any{map[string]any{"steps": []any{
		map[string]any{"sys": map[string]any{"op": "write", "path": ".gitignore", "content": "*\n"}},
		map[string]any{"sys": map[string]any{"op": "write", "path": "secret-work.txt", "content": "work the agent hides\n"}},
		map[string]any{"chunk": "Done.\n"},
	}}}}
	writeScripted(t, home, bin, map[string]any{"hider": script})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# hidden\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "hider", "--json")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	var s struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &s); err != nil {
		t.Fatalf("session new --json printed %q: %v", out, err)
	}
	out, err = d.cli("prompt", s.ID, "hide your work")
	if err != nil {
		t.Fatalf("prompt: %v\n%s", err, out)
	}
	if !strings.Contains(out, "1 untracked path hidden by changed ignore rules (.gitignore:1:*: secret-work.txt)") {
		t.Errorf("prompt output = %q; want the turn's end to name the hidden file and its rule", out)
	}
	evs, err := d.client.EventLog(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ended string
	for _, ev := range evs {
		if ev.Type == backends.EventTurnEnded {
			ended = string(ev.Data)
		}
	}
	if !strings.Contains(ended, `"hidden":{"count":1`) || !strings.Contains(ended, "secret-work.txt") {
		t.Errorf("turn.ended = %s; want the hidden file in it", ended)
	}
	diff, err := d.client.Diff(ctx, s.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(diff.Files) != 1 || diff.Files[0].Path != ".gitignore" || diff.HiddenCount != 1 || diff.Hidden[0].Path != "secret-work.txt" {
		t.Errorf("diff of turn 1 = files %+v, hidden %d %+v; want .gitignore added and secret-work.txt hidden", diff.Files, diff.HiddenCount, diff.Hidden)
	}
	out, err = d.cli("diff", s.ID, "--turn", "1")
	if err != nil || !strings.Contains(out, "secret-work.txt  (.gitignore:1:*)") {
		t.Errorf("agentpool diff --turn 1 = %v\n%s; want the hidden file and its rule", err, out)
	}
}
