package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// TestEndToEndCreateWithFirstPrompt creates sessions with their first
// prompt in the same request: from the CLI on a spare (the turn streamed
// as prompt streams it), through the API (the turn in the answer), a blank
// prompt refused naming the field, and a first turn that a spent budget
// refuses: the session is made all the same and the answer says why.
func TestEndToEndCreateWithFirstPrompt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "hi\n"})
	meter := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "metered answer\n"}},
		Usage: json.RawMessage(`{"inputTokens":1200,"outputTokens":300,"totalTokens":1500}`)}}}
	writeScripted(t, home, bin, map[string]any{"slow": spareScript(300), "meter": meter})
	// The meter provider's budget is spent by one turn.
	setProviderField(t, home, "meter", "budget", map[string]any{"tokens": 1000})
	d := startDaemon(t, bin, home, "AGENTPOOL_WORKTREES="+filepath.Join(t.TempDir(), "trees"),
		"AGENTPOOL_SPARES=slow=1", "AGENTPOOL_SPARES_REPOS="+repo)
	d.stopAtCleanup()
	ctx := context.Background()

	spare := d.waitSpares("ready", readySpares(1, ""))[0]
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "slow", "--prompt", "hello")
	if err != nil || !strings.Contains(out, "session "+spare.ID+" created") || !strings.Contains(out, "first token") ||
		!strings.Contains(out, "turn 1 ended: end_turn") || strings.Contains(out, "Next:") {
		t.Fatalf("session new --prompt: %v; want the spare %s adopted and its first turn streamed\n%s", err, spare.ID, out)
	}
	t.Logf("session new --prompt:\n%s", out)

	// A blank prompt is refused, naming the field; no session is made.
	before, err := d.client.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, d.client.BaseURL+"/v1/sessions",
		strings.NewReader(`{"repo": "`+repo+`", "agent": "meter", "prompt": "   "}`))
	req.Header.Set("Authorization", "Bearer "+d.client.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var eb struct{ Error httpapi.Error }
	_ = json.Unmarshal(body, &eb)
	if resp.StatusCode != http.StatusBadRequest || eb.Error.Field != "prompt" {
		t.Errorf("POST /v1/sessions with a blank prompt = %s %s; want 400 naming the field prompt", resp.Status, body)
	}
	if after, err := d.client.Sessions(ctx); err != nil || len(after) != len(before) {
		t.Errorf("sessions after the refused create: %d, %v; want %d", len(after), err, len(before))
	}

	// Through the API: the first turn is in the answer, and runs.
	c1, err := d.client.CreateSessionPrompt(ctx, pool.CreateRequest{Repo: repo, Agent: "meter"}, "go")
	if err != nil || c1.FirstTurn == nil || c1.FirstTurn.ID != 1 || !c1.Busy || c1.Turn != 1 || c1.FirstTurnError != nil {
		t.Fatalf("create with a prompt = %+v, %v; want turn 1 started", c1, err)
	}
	turn, err := d.client.Turn(ctx, c1.ID, 1, true)
	if err != nil || turn.StopReason != "end_turn" || turn.Prompt != "go" {
		t.Fatalf("first turn = %+v, %v; want it ended, end_turn", turn, err)
	}

	// The provider's budget is spent: the next session is made, its
	// first turn refused, and the answer says why.
	c2, err := d.client.CreateSessionPrompt(ctx, pool.CreateRequest{Repo: repo, Agent: "meter"}, "go")
	if err != nil || c2.ID == "" || c2.FirstTurn != nil || c2.FirstTurnError == nil || c2.FirstTurnError.Code != httpapi.CodeBudgetExceeded {
		t.Fatalf("create with a prompt past the provider's budget = %+v, %v; want the session and first_turn_error budget_exceeded", c2, err)
	}
	if s, err := d.client.Session(ctx, c2.ID); err != nil || s.Status != pool.StatusOpen || s.Busy {
		t.Errorf("session whose first turn was refused = %+v, %v; want it open and idle", s, err)
	}
	out, err = d.cli("session", "new", "--repo", repo, "--agent", "meter", "--prompt", "again")
	var exit interface{ ExitCode() int }
	if !errors.As(err, &exit) || !strings.Contains(out, "was created, but its first turn did not start") || !strings.Contains(out, "budget") {
		t.Errorf("session new --prompt past the budget: %v; want it to fail saying the session exists and why the turn did not start\n%s", err, out)
	}
	t.Logf("session new --prompt past the budget:\n%s", out)
}
