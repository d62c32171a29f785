package pool_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// BenchmarkBriefing200Turns makes the full briefing of a session of 200
// turns by two agents, as a third agent taking it up gets it: the
// session's record read from SQLite (each turn with its prompt, chunks,
// tool calls and end, about 20 events), the worktree's live diff from
// git (against the checkpoint the turn took before it started), the
// briefing written. No agent runs. It reports the median time
// of one briefing (p50-ms) besides the mean.
func BenchmarkBriefing200Turns(b *testing.B) {
	e := newEnv(b, map[string]any{"a": providerEntry(agenttest.Script{})}, nil)
	ctx := context.Background()
	s, err := e.p.Create(ctx, pool.CreateRequest{Repo: e.repo, Agent: "a", Warm: new(bool)})
	if err != nil {
		b.Fatal(err)
	}
	seq, err := e.st.NextSeq(ctx, s.ID)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	add := func(turn int64, agent string, typ backends.EventType, data any) {
		e.st.Append(backends.Event{Session: s.ID, Seq: seq, Turn: turn, Agent: agent, Time: now, Type: typ, Data: backends.MustJSON(data)})
		seq++
	}
	const turns = 200
	for i := int64(1); i <= turns; i++ {
		agent := []string{"claude", "codex"}[i%2]
		add(i, agent, backends.EventTurnStarted, map[string]any{"turn": i, "agent": agent, "prompt": fmt.Sprintf("turn %d: %s", i, strings.Repeat("please change the parser so that ", 6))})
		for c := range 12 {
			add(i, agent, backends.EventMessageChunk, backends.ChunkData{Role: backends.RoleAgent, Text: fmt.Sprintf("chunk %d of the answer, with some words in it. ", c)})
		}
		for c := range 3 {
			id := fmt.Sprintf("t%d-%d", i, c)
			add(i, agent, backends.EventToolCall, map[string]any{"id": id, "title": "Edit parser.go", "kind": "edit", "status": "in_progress"})
			add(i, agent, backends.EventToolUpdate, map[string]any{"id": id, "status": "completed"})
		}
		add(i, agent, backends.EventTurnEnded, map[string]any{"turn": i, "agent": agent, "stop_reason": "end_turn",
			"changes": pool.DiffStat{Files: 2, Additions: 10, Deletions: 3},
			"files":   []pool.TurnFile{{Path: "parser.go", Status: "modified", Additions: 8, Deletions: 3}, {Path: "parser_test.go", Status: "modified", Additions: 2}},
			"answer":  strings.Repeat("I changed the parser and its test; the tests pass. ", 10)})
	}
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(s.Worktree.Path, fmt.Sprintf("file%d.go", i)), []byte(strings.Repeat("package x\n// a line\n", 40)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if err := e.st.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	// The turn takes its checkpoint before it starts: the briefing
	// reads the worktree's state from it.
	at, err := pool.Checkpoint(ctx, e.p, s.ID)
	if err != nil {
		b.Fatal(err)
	}
	d, ok, err := pool.FullBriefing(ctx, e.p, s.ID, "gemini", turns+1, at)
	if err != nil || !ok || len(d.Turns)+len(d.Cut) != turns {
		b.Fatalf("FullBriefing = %d turns, %d cut, %v, %v; want %d turns told or cut", len(d.Turns), len(d.Cut), ok, err, turns)
	}
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if _, _, err := pool.FullBriefing(ctx, e.p, s.ID, "gemini", turns+1, at); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(d.Bytes), "bytes")
}
