package acp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// oldConversation is a replayed conversation of 12 updates: a user message,
// then agent messages, tool calls and their updates, and a plan.
func oldConversation() (steps []agenttest.Step, want []backends.EventType) {
	steps = append(steps, agenttest.Step{Update: json.RawMessage(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"old question"}}`)})
	want = append(want, backends.EventMessageChunk)
	for i := range 3 {
		id := fmt.Sprintf("old-%d", i)
		steps = append(steps,
			agenttest.Step{Chunk: fmt.Sprintf("old answer %d", i)},
			agenttest.Step{ToolCall: &agenttest.ToolCall{ID: id, Title: "old edit", Kind: "edit"}},
			agenttest.Step{ToolUpdate: &agenttest.ToolCall{ID: id, Status: "completed"}},
		)
		want = append(want, backends.EventMessageChunk, backends.EventToolCall, backends.EventToolUpdate)
	}
	steps = append(steps, agenttest.Step{Thought: "old thought"}, agenttest.Step{Update: json.RawMessage(`{"sessionUpdate":"plan","entries":[]}`)})
	want = append(want, backends.EventMessageChunk, backends.EventPlan)
	return steps, want
}

// history returns the history events among evs.
func history(t *testing.T, evs []backends.Event) []backends.HistoryData {
	t.Helper()
	var out []backends.HistoryData
	for _, e := range evs {
		if e.Type != backends.EventHistory {
			continue
		}
		if e.Turn != 0 {
			t.Errorf("history event %s has turn %d; want none", e.Data, e.Turn)
		}
		var h backends.HistoryData
		if err := json.Unmarshal(e.Data, &h); err != nil {
			t.Fatalf("history data %s: %v", e.Data, err)
		}
		out = append(out, h)
	}
	return out
}

// waitHistory waits until the outside recorder holds n history events.
func (h *harness) waitHistory(t *testing.T, n int) []backends.HistoryData {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := history(t, h.outside.all())
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) != n {
				t.Fatalf("%d history events; want %d (outside: %v)", len(got), n, h.outside.types())
			}
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkTurnIsNew checks that the turn's events are exactly the echo of the
// new prompt, and that nothing old came out as live output.
func (h *harness) checkTurnIsNew(t *testing.T, prompt string) {
	t.Helper()
	evs := h.turn.all()
	if len(evs) != 1 || h.turn.texts(backends.RoleAgent)[0] != "echo: "+prompt {
		t.Errorf("turn events %v (%v); want only the echo of %q", h.turn.types(), h.turn.texts(backends.RoleAgent), prompt)
	}
	for _, e := range append(evs, h.outside.all()...) {
		if e.Type != backends.EventHistory && strings.Contains(string(e.Data), "old") {
			t.Errorf("replayed update came out live: %s %s (turn %d)", e.Type, e.Data, e.Turn)
		}
	}
}

// wireOrder records the lines on the wire in one sequence, both directions
// interleaved as the backend saw them.
type wireOrder struct {
	mu    sync.Mutex
	lines []orderedLine
}

type orderedLine struct {
	at      time.Time
	inbound bool
	line    string
}

func (w *wireOrder) add(inbound bool, line []byte) {
	w.mu.Lock()
	w.lines = append(w.lines, orderedLine{time.Now(), inbound, string(line)})
	w.mu.Unlock()
}

// beforePrompt returns when session/prompt was written and how many
// session/update lines the agent had sent before it.
func (w *wireOrder) beforePrompt(t *testing.T) (time.Time, int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.lines {
		switch {
		case !l.inbound && strings.Contains(l.line, `"session/prompt"`):
			return l.at, n
		case l.inbound && strings.Contains(l.line, `"session/update"`):
			n++
		}
	}
	t.Fatal("no session/prompt on the wire")
	return time.Time{}, 0
}

// updatesAfterPrompt counts the session/update lines after session/prompt.
func (w *wireOrder) updatesAfterPrompt() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, sent := 0, false
	for _, l := range w.lines {
		switch {
		case !l.inbound && strings.Contains(l.line, `"session/prompt"`):
			sent = true
		case sent && l.inbound && strings.Contains(l.line, `"session/update"`):
			n++
		}
	}
	return n
}

func wantHistoryTypes(t *testing.T, got []backends.HistoryData, want []backends.EventType) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d history events; want %d", len(got), len(want))
	}
	for i, h := range got {
		if h.Type != want[i] {
			t.Errorf("history[%d].Type = %s; want %s", i, h.Type, want[i])
		}
	}
}

// Replay after session/load, whether the agent sends it before its answer
// (the spec) or after it (gemini-cli 0.61: one update, the answer, the
// rest), comes out through OnEvent as history, none of it in the first turn.
func TestLoadReplayIsHistory(t *testing.T) {
	steps, want := oldConversation()
	for _, tc := range []struct {
		name          string
		before, after []agenttest.Step
	}{
		{"before the answer", steps, nil},
		{"after the answer", steps[:1], steps[1:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := agenttest.Script{LoadSession: true, Replay: tc.before, ReplayAfterAnswer: tc.after, ReplayDelayMs: 30}
			h := newBackend(t, s, acp.Config{})
			if info := h.start(t, "sess-old"); !info.Resumed {
				t.Fatalf("Info = %+v; want resumed", info)
			}
			got := h.waitHistory(t, len(want))
			wantHistoryTypes(t, got, want)
			var c backends.ChunkData
			if err := json.Unmarshal(got[0].Data, &c); err != nil || c.Role != backends.RoleUserEcho || c.Text != "old question" {
				t.Errorf("history[0].Data = %s; want the user's old question", got[0].Data)
			}
			if _, err := h.prompt(t, "new"); err != nil {
				t.Fatalf("Prompt: %v", err)
			}
			h.checkTurnIsNew(t, "new")
			if n := len(history(t, h.outside.all())); n != len(want) {
				t.Errorf("%d history events after the turn; want %d", n, len(want))
			}
		})
	}
}

// A prompt issued as soon as Start returns waits for the replay that
// follows the load's answer to go quiet: session/prompt is written after
// the last replayed update, and its turn holds only its own output. A state
// update in the replay keeps its type and stays outside the turn.
func TestPromptWaitsForReplay(t *testing.T) {
	steps, want := oldConversation()
	after := append(steps[1:len(steps):len(steps)], agenttest.Step{Update: json.RawMessage(`{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"resumed","description":"x"}]}`)})
	s := agenttest.Script{LoadSession: true, Replay: steps[:1], ReplayAfterAnswer: after, ReplayDelayMs: 30}
	var wire wireOrder
	h := newBackend(t, s, acp.Config{Wire: wire.add})
	h.start(t, "sess-old")
	if _, err := h.prompt(t, "new"); err != nil {
		t.Fatalf("Prompt: %v", err)
	}
	if _, n := wire.beforePrompt(t); n != len(steps)+1 {
		t.Errorf("session/prompt written after %d updates; want after all %d of the replay", n, len(steps)+1)
	}
	wantHistoryTypes(t, history(t, h.outside.all()), want)
	h.checkTurnIsNew(t, "new")
	cmd := h.outside.waitType(t, backends.EventCommands)
	if cmd.Turn != 0 || !strings.Contains(string(h.b.Info().Commands), "resumed") {
		t.Errorf("commands event turn %d, Info.Commands %s; want outside any turn and applied", cmd.Turn, h.b.Info().Commands)
	}
}

// endless is an agent that replays forever after answering session/load:
// an update every 10 ms, never quiet for ReplayQuiet.
var endless = agenttest.Script{LoadSession: true, ReplayAfterAnswer: []agenttest.Step{{Chunks: 1 << 30, ChunksPerSecond: 100}}}

// The wait for a quiet replay is bounded: the prompt goes after
// ReplayMaxWait, and every update read before it was written is history.
func TestReplayWaitIsBounded(t *testing.T) {
	var wire wireOrder
	h := newBackend(t, endless, acp.Config{Wire: wire.add})
	h.start(t, "sess-old")
	start := time.Now()
	if _, err := h.prompt(t, "new"); err != nil {
		t.Fatalf("Prompt: %v", err)
	}
	at, before := wire.beforePrompt(t)
	if waited := at.Sub(start); waited < acp.ReplayMaxWait || waited > acp.ReplayMaxWait+5*time.Second {
		t.Errorf("session/prompt written after %v; want after ReplayMaxWait (%v), not much later", waited, acp.ReplayMaxWait)
	}
	if !contains(h.turn.texts(backends.RoleAgent), "echo: new") {
		t.Errorf("turn texts %q; want the echo of the prompt", h.turn.texts(backends.RoleAgent))
	}
	// The filter may read one update between the end of the window and
	// the write of session/prompt.
	if got := len(history(t, h.outside.all())); got < before-1 || got > before {
		t.Errorf("%d history events; want the %d updates sent before session/prompt (one may fall after)", got, before)
	}
	if wire.updatesAfterPrompt() == 0 {
		t.Error("the agent stopped replaying; want an endless replay")
	}
}

// A prompt cancelled while it waits for the replay is never sent.
func TestCancelDuringReplayWait(t *testing.T) {
	for _, how := range []string{"context", "Cancel"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			var wire wireOrder
			h := newBackend(t, endless, acp.Config{Wire: wire.add})
			h.start(t, "sess-old")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				res backends.TurnResult
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := h.b.Prompt(ctx, backends.Prompt{Text: "new", Turn: 1}, h.turn.add)
				done <- result{res, err}
			}()
			time.Sleep(300 * time.Millisecond)
			if how == "context" {
				cancel()
			} else if err := h.b.Cancel(context.Background()); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			r := <-done
			if r.err != nil || r.res.StopReason != backends.StopCancelled {
				t.Fatalf("Prompt = %+v, %v; want cancelled, nil", r.res, r.err)
			}
			wire.mu.Lock()
			defer wire.mu.Unlock()
			for _, l := range wire.lines {
				if !l.inbound && strings.Contains(l.line, `"session/prompt"`) {
					t.Errorf("session/prompt written after the turn was cancelled: %s", l.line)
				}
			}
			if evs := h.turn.all(); len(evs) != 0 {
				t.Errorf("cancelled turn got events %v; want none", h.turn.types())
			}
		})
	}
}
