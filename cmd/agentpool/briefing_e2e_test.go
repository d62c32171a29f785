package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// briefingProviders writes home's providers.json with agents "alpha"
// (takes embedded resources) and "beta" (does not), each the demo agent
// recording its prompts in a file of logs (which its sandbox may write).
func briefingProviders(t *testing.T, home, bin string) (alphaLog, betaLog string) {
	t.Helper()
	logs := t.TempDir()
	alphaLog, betaLog = filepath.Join(logs, "alpha.jsonl"), filepath.Join(logs, "beta.jsonl")
	alpha := agenttest.Script{EmbeddedContext: true, PromptLog: alphaLog, Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{Write: &agenttest.FileOp{Path: "notes.txt", Content: "alpha was here\n"}},
		{Chunk: "Alpha wrote notes.txt."},
	}}}}
	beta := agenttest.Script{PromptLog: betaLog, Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "Beta read the notes."}}}}}
	writeScripted(t, home, bin, map[string]any{"alpha": alpha, "beta": beta})
	// Let the agents write their logs under their sandbox.
	for _, id := range []string{"alpha", "beta"} {
		setProviderField(t, home, id, "sandbox", map[string]any{"write": []string{logs}})
	}
	return alphaLog, betaLog
}

var errBriefingsRead = errors.New("read up to the last turn's end")

func readPrompts(t *testing.T, path string) [][]agenttest.PromptBlock {
	t.Helper()
	got, err := agenttest.ReadPromptLog(path)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestBriefingEndToEnd switches a session's agent through the CLI
// (prompt --agent), the API and the MCP server's prompt tool: each switch
// carries the pool's briefing to the agent taking over (a text block for
// beta, an embedded resource for alpha, which gets only what it missed),
// the user's words reach it and the store unchanged, `agentpool events`
// shows the briefing folded on one line, and a session created with
// handoff off sends none.
func TestBriefingEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	alphaLog, betaLog := briefingProviders(t, home, bin)
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "proj"), map[string]string{"README.md": "# proj\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	sess, err := d.client.CreateSession(ctx, createReq(repo, "alpha"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, sess.ID, "", "write some notes", true); err != nil {
		t.Fatal(err)
	}
	// CLI: switch to beta.
	if out, err := d.cli("prompt", "--agent", "beta", sess.ID, "what do the notes say?"); err != nil {
		t.Fatalf("prompt --agent beta: %v\n%s", err, out)
	} else if !strings.Contains(out, "briefing for beta (full history): turn 1") {
		t.Errorf("prompt --agent's output lacks the briefing's note:\n%s", out)
	}
	gotB := readPrompts(t, betaLog)
	if len(gotB) != 1 || len(gotB[0]) != 2 || gotB[0][0].Type != "text" || gotB[0][1].Text != "what do the notes say?" {
		t.Fatalf("beta's prompts = %+v; want the briefing as text, then the user's words", gotB)
	}
	for _, w := range []string{"Briefing from agentpool", "### Turn 1 · alpha", "write some notes", "Alpha wrote notes.txt.", "`notes.txt` (+1 −0)", "+alpha was here"} {
		if !strings.Contains(gotB[0][0].Text, w) {
			t.Errorf("beta's briefing lacks %q:\n%s", w, gotB[0][0].Text)
		}
	}

	// MCP: back to alpha, which gets only what beta did.
	c := startMCP(t, bin, home, repo)
	text, sc := c.call("prompt", map[string]any{"session": sess.ID, "agent": "alpha", "text": "carry on", "wait_seconds": 30}, nil, false)
	if sc["turn"] != float64(3) {
		t.Fatalf("MCP prompt = %q, %v; want turn 3", text, sc)
	}
	gotA := readPrompts(t, alphaLog)
	if len(gotA) != 2 || len(gotA[1]) != 2 || gotA[1][0].Type != "resource" || gotA[1][0].Resource == nil || gotA[1][1].Text != "carry on" {
		t.Fatalf("alpha's prompts = %+v; want its second with an embedded resource, then the user's words", gotA)
	}
	if r := gotA[1][0].Resource; r.URI != "agentpool://session/"+sess.ID+"/briefing" || r.MimeType != "text/markdown" ||
		!strings.Contains(r.Text, "### Turn 2 · beta") || strings.Contains(r.Text, "### Turn 1") {
		t.Errorf("alpha's briefing = %+v; want turn 2 only, as agentpool://session/%s/briefing", r, sess.ID)
	}

	// API: to beta again, which gets what alpha did since.
	if _, err := d.client.Prompt(ctx, sess.ID, "beta", "and now?", true); err != nil {
		t.Fatal(err)
	}
	if gotB = readPrompts(t, betaLog); len(gotB) != 2 || !strings.Contains(gotB[1][0].Text, "last spoke") || !strings.Contains(gotB[1][0].Text, "### Turn 3 · alpha") {
		t.Errorf("beta's second prompt = %+v; want what happened since turn 2", gotB)
	}

	// The user's words as written, in the store and the events.
	turns, err := d.client.Turns(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []string{"write some notes", "what do the notes say?", "carry on", "and now?"} {
		if turns[i].Prompt != w {
			t.Errorf("turn %d's prompt = %q; want %q", i+1, turns[i].Prompt, w)
		}
	}
	var briefings []pool.BriefingData
	err = d.client.Events(ctx, sess.ID, 0, func(ev backends.Event) error {
		if ev.Type == pool.EventTurnBriefing {
			var b pool.BriefingData
			_ = json.Unmarshal(ev.Data, &b)
			briefings = append(briefings, b)
		}
		if ev.Type == backends.EventTurnEnded && ev.Turn == 4 {
			return errBriefingsRead
		}
		return nil
	})
	if err != nil && !errors.Is(err, errBriefingsRead) {
		t.Fatal(err)
	}
	if len(briefings) != 3 || briefings[0].Agent != "beta" || briefings[1].Delivery != "resource" || briefings[2].Kind != "since" {
		t.Errorf("turn.briefing events = %+v; want three: beta full, alpha as a resource, beta since", briefings)
	}
	out, err := d.cli("events", sess.ID)
	if err != nil {
		t.Fatalf("events: %v\n%s", err, out)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "turn.briefing") && strings.Contains(l, " beta turn 2 ") {
			line = l
		}
	}
	if !strings.Contains(line, "briefing for beta (full history): turn 1, ") || !strings.Contains(line, " as text [folded]") || strings.Contains(out, "Briefing from agentpool") {
		t.Errorf("events shows the briefing as %q; want one folded line with its size:\n%s", line, out)
	}

	// A fork's first agent, new to the copied history, gets all of it.
	fork, err := d.client.Fork(ctx, sess.ID, httpapi.ForkRequest{Agent: "beta"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, fork.ID, "", "go on in the fork", true); err != nil {
		t.Fatal(err)
	}
	gotB = readPrompts(t, betaLog)
	if last := gotB[len(gotB)-1]; len(last) != 2 || last[1].Text != "go on in the fork" ||
		!strings.Contains(last[0].Text, "You (beta) are taking up session "+fork.ID) || !strings.Contains(last[0].Text, "### Turn 4 · beta") || !strings.Contains(last[0].Text, "### Turn 1 · alpha") {
		t.Errorf("the fork's first prompt = %+v; want the full briefing of the copied history", last)
	}

	// A session created with handoff off sends none.
	req := createReq(repo, "alpha")
	req.Handoff = &pool.HandoffSetting{Handoff: pool.HandoffOff}
	off, err := d.client.CreateSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, off.ID, "", "one", true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, off.ID, "beta", "two", true); err != nil {
		t.Fatal(err)
	}
	if gotB = readPrompts(t, betaLog); len(gotB[len(gotB)-1]) != 1 || gotB[len(gotB)-1][0].Text != "two" {
		t.Errorf("beta's prompt with handoff off = %+v; want the user's words alone", gotB[len(gotB)-1])
	}
	// And the setting can be turned back on.
	if err := d.client.SetHandoff(ctx, off.ID, pool.HandoffSetting{Handoff: pool.HandoffBrief}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, off.ID, "alpha", "three", true); err != nil {
		t.Fatal(err)
	}
	if gotA = readPrompts(t, alphaLog); gotA[len(gotA)-1][0].Type != "resource" {
		t.Errorf("alpha's prompt with handoff back on = %+v; want a briefing", gotA[len(gotA)-1])
	}
}
