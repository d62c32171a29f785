package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMCPServerOfficialTSClient drives `agentpool mcp` with a client nobody
// here wrote: the official TypeScript MCP SDK from npm (pinned by
// testdata/mcpclient's package-lock.json), over stdio, against the built
// daemon. Its tools carry one type per property; a prompt's permission
// request shows in wait_turn; another MCP server answers it; and once the
// turn has ended, wait_turn with no turn (from a third MCP server) reports
// that turn's end, not "no turn yet". An empty session is refused naming
// the argument.
func TestMCPServerOfficialTSClient(t *testing.T) {
	client := installNodeClient(t, "mcpclient", "client.mjs")
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# repo\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()

	step := func(arg map[string]any) map[string]map[string]any {
		t.Helper()
		arg["bin"], arg["home"], arg["cwd"] = bin, home, repo
		b, _ := json.Marshal(arg)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, client.Node, client.Script, string(b))
		cmd.Dir = filepath.Dir(client.Script)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Run(); err != nil {
			t.Fatalf("TS client (%s): %v\n%s%s", arg["step"], err, stdout.String(), stderr.String())
		}
		out := map[string]map[string]any{}
		sc := bufio.NewScanner(&stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("TS client printed %q: %v", sc.Text(), err)
			}
			t.Logf("TS client: %s", sc.Bytes())
			out[m["step"].(string)] = m
		}
		return out
	}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }

	start := step(map[string]any{"step": "start"})
	tools := start["tools"]
	if names, _ := tools["names"].([]any); len(names) < 15 {
		t.Errorf("the TS client listed %v tools; want agentpool's", tools["names"])
	}
	if unions, _ := tools["unions"].([]any); len(unions) != 0 {
		t.Errorf("tools %v have a property of several types; want one type each (optional fields)", unions)
	}
	session := str(start["create"], "session")
	if session == "" || start["create"]["error"] == true {
		t.Fatalf("create_session: %v", start["create"])
	}
	if p := start["prompt"]; p["error"] == true || !strings.Contains(str(p, "text"), "turn 1") {
		t.Fatalf("prompt: %v", p)
	}
	wp := str(start["wait_pending"], "text")
	if !regexp.MustCompile(`request [A-Z0-9]{26}`).MatchString(wp) || !strings.Contains(wp, "allow_once") {
		t.Fatalf("wait_turn with a permission pending = %q; want the request, its choices", wp)
	}

	answered := step(map[string]any{"step": "answer", "session": session})["answer"]
	if answered["error"] == true || str(answered, "request") == "" || !strings.Contains(str(answered, "text"), "allow_once") {
		t.Fatalf("answer_permission from another MCP server: %v", answered)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		turns, err := d.client.Turns(context.Background(), session)
		if err != nil {
			t.Fatal(err)
		}
		if len(turns) == 1 && turns[0].EndedAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("turn 1 did not end after its answer: %+v", turns)
		}
		time.Sleep(50 * time.Millisecond)
	}

	ended := step(map[string]any{"step": "ended", "session": session})
	we := str(ended["wait_ended"], "text")
	if ended["wait_ended"]["error"] == true || !strings.Contains(we, "Turn 1") || !strings.Contains(we, "ended") ||
		!strings.Contains(we, "AGENTPOOL_DEMO.md") || strings.Contains(we, "no turn yet") {
		t.Errorf("wait_turn with no turn after the turn's end = %q; want turn 1's end and what it changed", we)
	}
	if e := ended["empty"]; e["error"] != true || !strings.Contains(str(e, "text"), "session is required") {
		t.Errorf("get_session with an empty session = %v; want an error naming the argument", e)
	}
}
