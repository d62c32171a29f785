package main

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
)

// promptWriterScript is an agent that writes file with the prompt and says so.
func promptWriterScript(file string) agenttest.Script {
	return agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{Write: &agenttest.FileOp{Path: file, Content: "{{prompt}}\n"}},
		{Chunk: "wrote " + file},
	}}}}
}

// TestMCPServerAttempts runs the attempts tools of `agentpool mcp` against
// a daemon: two agents at one task, a check that only one passes, and the
// pick of that one. It is skipped by a daemon without the attempts API.
func TestMCPServerAttempts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "proj"), map[string]string{"README.md": "# proj\n"})
	writeScripted(t, home, bin, map[string]any{"alpha": promptWriterScript("alpha.txt"), "beta": promptWriterScript("beta.txt")})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	var ae *httpapi.Error
	if err := d.client.Call(context.Background(), http.MethodGet, "/v1/attempts", nil, nil); errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		t.Skipf("this daemon has no attempts API (GET /v1/attempts: %v)", err)
	}
	c := startMCP(t, bin, home, repo)

	text, sc := c.call("start_attempts", map[string]any{"prompt": "one task", "agents": []string{"alpha", "beta"},
		"check": "test -f alpha.txt"}, nil, false)
	id, _ := sc["id"].(string)
	if !strings.HasPrefix(id, "att-") || !strings.Contains(text, "2 attempts") {
		t.Fatalf("start_attempts = %q, %v; want a set of 2 attempts", text, sc)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for sc["state"] == "running" && time.Now().Before(deadline) {
		text, sc = c.call("get_attempts", map[string]any{"id": id, "wait_seconds": 20}, "att-wait", false)
	}
	if sc["state"] != "done" {
		t.Fatalf("get_attempts = %q, %v; want the set done", text, sc)
	}
	sessionOf := map[string]string{}
	for _, a := range sc["attempts"].([]any) {
		a := a.(map[string]any)
		sessionOf[a["agent"].(string)] = a["session"].(string)
	}
	if !strings.Contains(text, "agent alpha: done") || !strings.Contains(text, "check passed") || !strings.Contains(text, "check failed") {
		t.Errorf("get_attempts text = %q; want alpha done, one check passed and one failed", text)
	}
	text, _ = c.call("list_attempts", nil, nil, false)
	if !strings.Contains(text, id) {
		t.Errorf("list_attempts = %q; want %s", text, id)
	}
	text, sc = c.call("pick_attempt", map[string]any{"id": id, "session": sessionOf["alpha"]}, nil, false)
	if sc["state"] != "picked" || sc["picked"] != sessionOf["alpha"] || !strings.Contains(text, "Merged") {
		t.Fatalf("pick_attempt = %q, %v; want alpha's session picked and merged", text, sc)
	}
	if got := e2eGit(t, repo, "show", "main:alpha.txt"); got != "one task\n" {
		t.Errorf("main:alpha.txt = %q; want the picked attempt's work", got)
	}
	text, _ = c.call("pick_attempt", map[string]any{"id": "att-no-such-set", "session": sessionOf["beta"]}, nil, true)
	if !strings.Contains(text, "agentpool refused") {
		t.Errorf("pick_attempt of an unknown set = %q; want the daemon's refusal", text)
	}
}
