package pool

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
)

// TestBriefTurnsCopiedHistory: a session whose log starts with a history
// copied from another (a fork: turns 1–2 of the source, then its own
// turn 1) is briefed with the whole copied history, by place in the log
// rather than by turn number.
func TestBriefTurnsCopiedHistory(t *testing.T) {
	var evs []backends.Event
	seq := int64(0)
	add := func(typ backends.EventType, turn int64, data string) {
		seq++
		evs = append(evs, backends.Event{Seq: seq, Turn: turn, Type: typ, Data: []byte(data)})
	}
	add(backends.EventTurnStarted, 1, `{"agent": "claude", "prompt": "one"}`)
	add(backends.EventTurnEnded, 1, `{"stop_reason": "end_turn", "answer": "did one"}`)
	add(backends.EventTurnStarted, 2, `{"agent": "codex", "prompt": "two"}`)
	add(backends.EventTurnEnded, 2, `{"stop_reason": "cancelled"}`)
	add(EventSessionHandoff, 0, `{"bytes": 4096}`)
	add(backends.EventTurnStarted, 1, `{"agent": "gemini", "prompt": "the fork's first"}`)
	var h HandoffSetting
	got := briefTurns(evs, 1, &h)
	var s []string
	for _, bt := range got {
		s = append(s, fmt.Sprintf("%d %s %q %s %q", bt.ID, bt.Agent, bt.Prompt, bt.StopReason, bt.Answer))
	}
	want := []string{`1 claude "one" end_turn "did one"`, `2 codex "two" cancelled ""`}
	if strings.Join(s, "; ") != strings.Join(want, "; ") || h.Bytes != 4096 {
		t.Errorf("briefTurns = %q, setting %+v; want %q and 4096 bytes", s, h, want)
	}
}

// TestBuildBriefingSmallBound: fixed parts that outgrow a small bound are
// cut to it, and it says so.
func TestBuildBriefingSmallBound(t *testing.T) {
	big := strings.Repeat("+a line of the diff\n", 2000)
	d := buildBriefing(briefInput{Session: "s", Agent: "a", Turn: 3, Limit: MinBriefingBytes,
		Turns: []briefTurn{{ID: 1, Agent: "b", Prompt: "p", Ended: true, StopReason: "end_turn"}, {ID: 2, Agent: "b", Prompt: strings.Repeat("q", 5000), Ended: true}},
		Live:  &Diff{Files: []FileChange{{Path: "x", Additions: 2000}}, Stat: DiffStat{Files: 1, Additions: 2000}, Patch: big}})
	if d.Bytes > MinBriefingBytes || d.Bytes != len(d.Text) {
		t.Errorf("briefing of %d bytes (text %d); want at most %d", d.Bytes, len(d.Text), MinBriefingBytes)
	}
	if !strings.Contains(d.Text, "diff cut at") {
		t.Errorf("the cut diff is not said:\n%s", d.Text)
	}
	if len(d.Cut)+len(d.Turns) != 2 {
		t.Errorf("turns %v, cut %v; want both named", d.Turns, d.Cut)
	}
}
