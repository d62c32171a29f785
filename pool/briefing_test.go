package pool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/pool"
)

// briefAgents defines providers "a" (takes embedded resources) and "b"
// (does not), each recording the prompts it gets in its own log, and
// each answering with a chunk naming itself; a's first turn writes
// hello.txt.
func briefAgents(t *testing.T, tweak func(a, b *agenttest.Script)) (map[string]any, string, string) {
	dir := t.TempDir()
	la, lb := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	a := agenttest.Script{EmbeddedContext: true, PromptLog: la, Turns: []agenttest.Turn{
		{Steps: []agenttest.Step{
			{ToolCall: &agenttest.ToolCall{ID: "w", Title: "Write hello.txt", Kind: "edit", Status: "in_progress"}},
			{Write: &agenttest.FileOp{Path: "hello.txt", Content: "hello\nworld\n"}},
			{Chunk: "A wrote hello.txt as asked."},
		}},
		{Steps: []agenttest.Step{{Chunk: "A again: all good."}}},
	}}
	b := agenttest.Script{PromptLog: lb, Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "B looked and found {{prompt}}"}}}}}
	if tweak != nil {
		tweak(&a, &b)
	}
	return map[string]any{"a": providerEntry(a), "b": providerEntry(b)}, la, lb
}

func promptLog(t *testing.T, path string) [][]agenttest.PromptBlock {
	t.Helper()
	got, err := agenttest.ReadPromptLog(path)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// briefings are the turn.briefing events of a session, by turn.
func (e *env) briefings(session string) map[int64]pool.BriefingData {
	e.t.Helper()
	out := map[int64]pool.BriefingData{}
	for _, ev := range e.events(session) {
		if ev.Type != pool.EventTurnBriefing {
			continue
		}
		var d pool.BriefingData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			e.t.Fatal(err)
		}
		if d.Turn != ev.Turn {
			e.t.Errorf("turn.briefing of turn %d says turn %d", ev.Turn, d.Turn)
		}
		out[ev.Turn] = d
	}
	return out
}

func wantIn(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
}

// TestBriefingOnSwitch: a → b → a. b's first prompt carries the full
// briefing as a text block ahead of the user's words (b takes no
// embedded resources): the prompt and answer of a's turn, the files it
// changed with their diff stat, the worktree's diff, the open review
// comments and how the last turn ended. a, back, gets as an embedded
// resource only what b did. The user's prompts stay as written.
func TestBriefingOnSwitch(t *testing.T) {
	provs, la, lb := briefAgents(t, nil)
	e := newEnv(t, provs, nil)
	s := e.session("a")
	e.prompt(s.ID, "", "please add a hello file")
	// A review of turn 1 whose comment is still open.
	rv := wiring.Reviews{S: e.st}
	if err := rv.PutReview(context.Background(), pool.Review{Session: s.ID, Turn: 1, CreatedAt: time.Now(),
		Comments: []pool.ReviewComment{{Path: "hello.txt", Line: 2, Side: pool.SideNew, Text: "say hello to the moon instead"}}}); err != nil {
		t.Fatal(err)
	}
	e.prompt(s.ID, "b", "check the hello file")
	e.prompt(s.ID, "a", "thanks, carry on")

	gotB := promptLog(t, lb)
	if len(gotB) != 1 || len(gotB[0]) != 2 || gotB[0][0].Type != "text" || gotB[0][1].Type != "text" {
		t.Fatalf("b's prompts = %+v; want one of two text blocks (briefing, user)", gotB)
	}
	if gotB[0][1].Text != "check the hello file" {
		t.Errorf("b's user block = %q; want the user's words unchanged", gotB[0][1].Text)
	}
	brief := gotB[0][0].Text
	wantIn(t, "b's briefing", brief,
		"Briefing from agentpool", "not the user's words",
		"### Turn 1 · a · end_turn, 1 file changed (+2 −0)", // who did what, how it ended
		"please add a hello file",                           // the user's prompt
		"A wrote hello.txt as asked.",                       // a's final answer
		"`hello.txt` (+2 −0)",                               // files with diff stat
		"+world",                                            // the worktree's diff
		"## How the last turn ended", "Turn 1 (a): end_turn",
		"## Open review comments (1)", "`hello.txt:2`", "say hello to the moon instead",
	)

	gotA := promptLog(t, la)
	if len(gotA) != 2 {
		t.Fatalf("a got %d prompts; want 2", len(gotA))
	}
	if len(gotA[0]) != 1 || gotA[0][0].Text != "please add a hello file" {
		t.Errorf("a's first prompt = %+v; want the user's words alone", gotA[0])
	}
	back := gotA[1]
	if len(back) != 2 || back[0].Type != "resource" || back[0].Resource == nil || back[1].Type != "text" || back[1].Text != "thanks, carry on" {
		t.Fatalf("a's second prompt = %+v; want an embedded resource, then the user's words", back)
	}
	res := back[0].Resource
	if res.URI != "agentpool://session/"+s.ID+"/briefing" || res.MimeType != "text/markdown" {
		t.Errorf("resource uri, mimeType = %q, %q", res.URI, res.MimeType)
	}
	wantIn(t, "a's briefing", res.Text, "last spoke", "turn 1", "### Turn 2 · b", "check the hello file", "B looked and found")
	if strings.Contains(res.Text, "### Turn 1") {
		t.Errorf("a's briefing tells of turn 1, which a ran itself:\n%s", res.Text)
	}

	bs := e.briefings(s.ID)
	if len(bs) != 2 {
		t.Fatalf("turn.briefing events = %v; want turns 2 and 3", bs)
	}
	if d := bs[2]; d.Agent != "b" || d.Kind != "full" || d.Delivery != "text" || fmt.Sprint(d.Turns) != "[1]" || d.Bytes != len(brief) || d.Text != brief || d.Limit != pool.DefaultBriefingBytes {
		t.Errorf("briefing of turn 2 = %+v", d)
	}
	if d := bs[3]; d.Agent != "a" || d.Kind != "since" || d.Since != 1 || d.Delivery != "resource" || fmt.Sprint(d.Turns) != "[2]" {
		t.Errorf("briefing of turn 3 = %+v", d)
	}
	turns, err := e.p.Turns(context.Background(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"please add a hello file", "check the hello file", "thanks, carry on"} {
		if turns[i].Prompt != want {
			t.Errorf("turn %d's stored prompt = %q; want %q", i+1, turns[i].Prompt, want)
		}
	}
	for _, ev := range e.events(s.ID) {
		if ev.Type == backends.EventTurnStarted && strings.Contains(string(ev.Data), "Briefing") {
			t.Errorf("turn.started carries the briefing: %s", ev.Data)
		}
	}
}

// TestBriefingBound: a long history is cut to the bound, the newest
// turns kept, and the briefing says which were left out.
func TestBriefingBound(t *testing.T) {
	provs, _, lb := briefAgents(t, func(a, _ *agenttest.Script) {
		a.Turns = []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: strings.Repeat("answer ", 100)}}}}
	})
	e := newEnv(t, provs, nil)
	s := e.session("a")
	if err := e.p.SetHandoff(context.Background(), s.ID, pool.HandoffSetting{Bytes: 8 << 10}); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := 1; i <= n; i++ {
		e.prompt(s.ID, "", fmt.Sprintf("prompt number %d %s", i, strings.Repeat("x", 600)))
	}
	e.prompt(s.ID, "b", "what happened?")
	d := e.briefings(s.ID)[n+1]
	if d.Bytes > 8<<10 || d.Limit != 8<<10 {
		t.Errorf("briefing of %d bytes, limit %d; want within 8 KiB", d.Bytes, d.Limit)
	}
	if len(d.Cut) == 0 || d.Cut[0] != 1 || len(d.Turns) == 0 || d.Turns[len(d.Turns)-1] != n || len(d.Cut)+len(d.Turns) != n {
		t.Fatalf("briefing covers %v, cut %v; want the newest kept, the oldest cut, all %d named", d.Turns, d.Cut, n)
	}
	text := promptLog(t, lb)[0][0].Text
	wantIn(t, "the briefing", text, fmt.Sprintf("prompt number %d ", n), "Left out to stay within 8192 bytes: turns 1–")
	if strings.Contains(text, "prompt number 1 ") {
		t.Errorf("the oldest turn is in a cut briefing")
	}
	if i, j := strings.Index(text, fmt.Sprintf("### Turn %d ", n)), strings.Index(text, fmt.Sprintf("### Turn %d ", n-1)); i < 0 || j < 0 || i > j {
		t.Errorf("turns not newest first (turn %d at %d, turn %d at %d)", n, i, n-1, j)
	}
}

// TestBriefingAfterContextLost: an agent whose conversation was lost
// (it crashed, and could not load its session again) gets the full
// briefing, its own turns included.
func TestBriefingAfterContextLost(t *testing.T) {
	provs, la, _ := briefAgents(t, func(a, _ *agenttest.Script) {
		a.LoadSession, a.LoadFails = true, true
	})
	e := newEnv(t, provs, nil)
	s := e.session("a")
	e.prompt(s.ID, "", "first, from a")
	e.prompt(s.ID, "b", "second, from b")
	e.killAgent(s.ID, "a")
	e.prompt(s.ID, "a", "third, back to a")
	if n := countType(e.events(s.ID), backends.EventAgentContextLost); n != 1 {
		t.Fatalf("%d agent.context_lost; want 1", n)
	}
	d := e.briefings(s.ID)[3]
	if d.Kind != "full" || fmt.Sprint(d.Turns) != "[1 2]" {
		t.Fatalf("briefing of turn 3 = kind %q turns %v; want full, [1 2]", d.Kind, d.Turns)
	}
	got := promptLog(t, la)
	wantIn(t, "a's briefing", got[len(got)-1][0].Resource.Text, "### Turn 1 · a", "first, from a", "### Turn 2 · b", "second, from b")
}

// TestBriefingAfterResume: an agent that took up its own conversation
// again (session/load after a restart of the pool) gets only what
// happened since it last spoke.
func TestBriefingAfterResume(t *testing.T) {
	provs, la, _ := briefAgents(t, func(a, _ *agenttest.Script) { a.LoadSession = true })
	e := newEnv(t, provs, nil)
	s := e.session("a")
	e.prompt(s.ID, "", "first, from a")
	e.prompt(s.ID, "b", "second, from b")
	e.shutdown()
	e.open()
	e.prompt(s.ID, "a", "third, back to a")
	d := e.briefings(s.ID)[3]
	if d.Kind != "since" || d.Since != 1 || fmt.Sprint(d.Turns) != "[2]" {
		t.Fatalf("briefing of turn 3 = kind %q since %d turns %v; want since 1, [2]", d.Kind, d.Since, d.Turns)
	}
	got := promptLog(t, la)
	if text := got[len(got)-1][0].Resource.Text; strings.Contains(text, "### Turn 1") {
		t.Errorf("a's briefing tells of its own turn 1:\n%s", text)
	}
}

// TestBriefingOff: with the session's handoff off, a switch sends the
// user's words alone and no turn.briefing; a provider's "off" does too.
func TestBriefingOff(t *testing.T) {
	t.Run("session", func(t *testing.T) {
		provs, _, lb := briefAgents(t, nil)
		e := newEnv(t, provs, nil)
		s := e.session("a")
		e.prompt(s.ID, "", "one")
		if err := e.p.SetHandoff(context.Background(), s.ID, pool.HandoffSetting{Handoff: pool.HandoffOff}); err != nil {
			t.Fatal(err)
		}
		e.prompt(s.ID, "b", "two")
		if got := promptLog(t, lb); len(got) != 1 || len(got[0]) != 1 || got[0][0].Text != "two" {
			t.Errorf("b's prompts = %+v; want the user's words alone", got)
		}
		if bs := e.briefings(s.ID); len(bs) != 0 {
			t.Errorf("turn.briefing events: %v", bs)
		}
		if err := e.p.SetHandoff(context.Background(), s.ID, pool.HandoffSetting{Handoff: "sometimes"}); err == nil {
			t.Errorf("SetHandoff(sometimes) = nil; want an error")
		}
	})
	t.Run("provider", func(t *testing.T) {
		provs, _, lb := briefAgents(t, nil)
		provs["b"].(map[string]any)["handoff"] = "off"
		e := newEnv(t, provs, nil)
		s := e.session("a")
		e.prompt(s.ID, "", "one")
		e.prompt(s.ID, "b", "two")
		if got := promptLog(t, lb); len(got) != 1 || len(got[0]) != 1 {
			t.Errorf("b's prompts = %+v; want the user's words alone", got)
		}
	})
}
