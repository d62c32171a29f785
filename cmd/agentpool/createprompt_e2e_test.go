package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
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
	d, repo := createPromptDaemon(t)
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

// TestEndToEndCreateStream: POST /v1/sessions asked for as an event
// stream answers with the session (create.result), then the session's
// events from its first, the first turn's included, in the one request;
// what a client saw is what the store holds. A refused first turn still
// gives the session and its stream; a bad request is a plain 400.
func TestEndToEndCreateStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	d, repo := createPromptDaemon(t)
	ctx := context.Background()

	// streamed creates a session with its stream and reads it to the
	// first turn's end (or, without a turn, to agent.ready).
	streamed := func(agent, prompt string) (httpapi.CreatedSession, []backends.Event) {
		t.Helper()
		var got []backends.Event
		var answer httpapi.CreatedSession
		cs, err := d.client.CreateStream(ctx, httpapi.CreateSessionRequest{CreateRequest: pool.CreateRequest{Repo: repo, Agent: agent}, Prompt: prompt},
			func(cs httpapi.CreatedSession) error {
				if len(got) > 0 {
					t.Errorf("the answer came after %d events", len(got))
				}
				answer = cs
				return nil
			},
			func(ev backends.Event) error {
				got = append(got, ev)
				if answer.FirstTurn != nil && ev.Type == backends.EventTurnEnded ||
					answer.FirstTurn == nil && ev.Type == backends.EventAgentReady {
					return httpapi.ErrStop
				}
				return nil
			})
		if err != nil || cs.ID == "" || cs.ID != answer.ID {
			t.Fatalf("CreateStream = %+v, %v; answer given %+v", cs, err, answer)
		}
		return cs, got
	}

	// On a spare, with a prompt: every event from seq 1, the first token
	// among them, and the same events as the store's log.
	spare := d.waitSpares("ready", readySpares(1, ""))[0]
	cs, got := streamed("slow", "go")
	if cs.ID != spare.ID || cs.FirstTurn == nil || cs.FirstTurn.ID != 1 || cs.FirstTurnError != nil {
		t.Fatalf("streamed create = %+v; want the spare %s adopted with turn 1 started", cs, spare.ID)
	}
	t.Logf("streamed create: %v", typesOf(got))
	if len(got) == 0 || got[0].Type != backends.EventSessionCreated {
		t.Fatalf("stream of the create: %v; want it to start with session.created", typesOf(got))
	}
	for i, ev := range got {
		if ev.Seq != int64(i+1) || ev.Session != cs.ID {
			t.Fatalf("event %d of the stream: seq %d of %q; want seq %d of %s (%v)", i, ev.Seq, ev.Session, i+1, cs.ID, typesOf(got))
		}
	}
	var text strings.Builder
	for _, ev := range got {
		text.Write(ev.Data)
	}
	if !strings.Contains(text.String(), "first token") {
		t.Errorf("stream of the create: %v; want the first turn's token", typesOf(got))
	}
	stored, err := d.client.EventLog(ctx, cs.ID, 0)
	if err != nil || len(stored) < len(got) {
		t.Fatalf("event log = %d events, %v; want at least the %d streamed", len(stored), err, len(got))
	}
	for i, ev := range got {
		if a, b := fmt.Sprintf("%d %s %d %s", ev.Seq, ev.Type, ev.Turn, ev.Data), fmt.Sprintf("%d %s %d %s", stored[i].Seq, stored[i].Type, stored[i].Turn, stored[i].Data); a != b {
			t.Errorf("event %d streamed %s, stored %s", i+1, a, b)
		}
	}

	// Past the budget: the session and its stream, with why no turn.
	spend, err := d.client.CreateSessionPrompt(ctx, pool.CreateRequest{Repo: repo, Agent: "meter"}, "spend")
	if err != nil || spend.FirstTurn == nil {
		t.Fatalf("create to spend the budget = %+v, %v", spend, err)
	}
	if _, err := d.client.Turn(ctx, spend.ID, 1, true); err != nil {
		t.Fatal(err)
	}
	cs, got = streamed("meter", "again")
	if cs.FirstTurn != nil || cs.FirstTurnError == nil || cs.FirstTurnError.Code != httpapi.CodeBudgetExceeded || len(got) == 0 {
		t.Errorf("streamed create past the budget = %+v with %v; want first_turn_error budget_exceeded and the session's events", cs, typesOf(got))
	}

	// The raw answer: 201, text/event-stream, Location, the answer first
	// and without an id; a bad request is a JSON 400 even so.
	req, _ := http.NewRequest(http.MethodPost, d.client.BaseURL+"/v1/sessions",
		strings.NewReader(`{"repo": "`+repo+`", "agent": "meter"}`))
	req.Header.Set("Authorization", "Bearer "+d.client.Token)
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 4096)
	n, _ := io.ReadAtLeast(resp.Body, head, len("retry: 1000\n\nevent: create.result\n"))
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Content-Type") != "text/event-stream" ||
		!strings.HasPrefix(resp.Header.Get("Location"), "/v1/sessions/") ||
		!strings.HasPrefix(string(head[:n]), "retry: 1000\n\nevent: create.result\ndata: {") {
		t.Errorf("streamed create = %s %q, Location %q; body starts %q", resp.Status, resp.Header.Get("Content-Type"), resp.Header.Get("Location"), head[:n])
	}
	req, _ = http.NewRequest(http.MethodPost, d.client.BaseURL+"/v1/sessions", strings.NewReader(`{"agent": "meter"}`))
	req.Header.Set("Authorization", "Bearer "+d.client.Token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"field":"repo"`) {
		t.Errorf("streamed create without a repo = %s %s; want a JSON 400 naming repo", resp.Status, body)
	}
}

// typesOf lists the seqs and types of evs.
func typesOf(evs []backends.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%d:%s", ev.Seq, ev.Type)
	}
	return out
}

// createPromptDaemon starts the daemon for the create-with-prompt tests,
// with a repository: "slow" (one spare of it kept) and "meter", whose
// budget one turn spends.
func createPromptDaemon(t *testing.T) (*daemon, string) {
	t.Helper()
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "hi\n"})
	meter := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "metered answer\n"}},
		Usage: json.RawMessage(`{"inputTokens":1200,"outputTokens":300,"totalTokens":1500}`)}}}
	writeScripted(t, home, bin, map[string]any{"slow": spareScript(300), "meter": meter})
	setProviderField(t, home, "meter", "budget", map[string]any{"tokens": 1000})
	d := startDaemon(t, bin, home, "AGENTPOOL_WORKTREES="+filepath.Join(t.TempDir(), "trees"),
		"AGENTPOOL_SPARES=slow=1", "AGENTPOOL_SPARES_REPOS="+repo)
	d.stopAtCleanup()
	return d, repo
}
