package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/worktree"
	acp "github.com/coder/acp-go-sdk"
)

// BenchmarkACPFaceSessionNew measures what an editor waits for through
// `agentpool acp`, with the demo agent (answering each prompt with one
// chunk) kept as spares: session/new answered from a spare (new_p50_ms,
// new_p99_ms), the first chunk of the session's first prompt
// (first_chunk_ms) against a warm prompt's of the same session
// (warm_chunk_ms, back to back) and their ratio (ratio_first, the median
// of each session's), and against a warm prompt sent after the same
// pause as the first (idle_warm_chunk_ms, ratio_first_idle), beside the demo agent's own session/new measured directly
// over its stdio (agent_new_p50_ms) and its whole cold start, spawn to
// session/new answered (agent_cold_p50_ms). Each iteration opens
// sessionsPerIter sessions, one at a time, each from a ready spare.
//
// Then as many sessions of an agent with no spares kept (the same script
// as another provider), through a second `agentpool acp`: session/new
// answered (nospare_new_p50_ms), and the first chunk of a prompt sent the
// moment it is answered, counted from session/new (nospare_chunk_p50_ms),
// beside the agent alone spawned, initialized, given session/new and the
// same prompt, to its first chunk (agent_cold_chunk_p50_ms), and a
// session's worktree made by the worktree manager alone (worktree_p50_ms).
// nospare_overhead_ms is nospare_chunk - agent_cold_chunk - worktree, the
// pool's own cost of a session without a spare (the budget: 20 ms).
func BenchmarkACPFaceSessionNew(b *testing.B) {
	perIter := 20
	if testing.Short() {
		perIter = 3 // make bench-smoke
	}
	bin := agentpoolBinary(b)
	home := b.TempDir()
	repo := e2eRepoAtB(b, filepath.Join(b.TempDir(), "repo"))
	script := agenttest.Script{AgentName: "bench", Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "first token"}}}}}
	writeScripted(b, home, bin, map[string]any{"fast": script, "cold": script})
	_, client, _ := startBenchDaemonEnv(b, bin, home, []string{"AGENTPOOL_WORKTREES=" + filepath.Join(b.TempDir(), "trees")},
		"--log-level", "warn", "--max-warm", "64", "--spares", "fast=2", "--spares-repo", repo)
	ed := startEditor(b, bin, home, repo, "--agent", "fast")
	ed.chunks = make(chan acp.SessionId, 1)
	coldEd := startEditor(b, bin, home, repo, "--agent", "cold")
	coldEd.chunks = make(chan acp.SessionId, 1)
	ctx := context.Background()
	for _, e := range []*acpEditor{ed, coldEd} {
		if _, err := e.conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
			b.Fatal(err)
		}
	}
	wtm, err := worktree.NewManager(worktree.Config{Root: filepath.Join(b.TempDir(), "wt"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	js, err := json.Marshal(script)
	if err != nil {
		b.Fatal(err)
	}
	var news, firsts, warms, agentNews, agentColds []time.Duration
	var idleWarms []time.Duration
	var coldNews, coldChunks, agentColdChunks, trees []time.Duration
	var ratios, idleRatios []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for range perIter {
			b.StopTimer()
			waitSparesReady(b, client, 2)
			b.StartTimer()
			start := time.Now()
			res, err := ed.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: repo, McpServers: []acp.McpServer{}})
			if err != nil {
				b.Fatal(err)
			}
			news = append(news, time.Since(start))
			// A person types the first prompt a moment after the thread
			// opens; the warm prompt it is compared with comes after the
			// same pause (idleWarm), and back to back (warm).
			b.StopTimer()
			time.Sleep(editorPause)
			b.StartTimer()
			first := promptFirstChunk(b, ed, res.SessionId)
			var warm []time.Duration
			for range 3 {
				warm = append(warm, promptFirstChunk(b, ed, res.SessionId))
			}
			b.StopTimer()
			time.Sleep(editorPause)
			b.StartTimer()
			idle := promptFirstChunk(b, ed, res.SessionId)
			firsts = append(firsts, first)
			warms = append(warms, median(warm))
			idleWarms = append(idleWarms, idle)
			ratios = append(ratios, float64(first)/float64(median(warm)))
			idleRatios = append(idleRatios, float64(first)/float64(idle))
			b.StopTimer()
			if _, err := client.CloseSession(ctx, string(res.SessionId), true); err != nil {
				b.Fatal(err)
			}
			// The agent alone: spawned, initialized, session/new.
			spawn := time.Now()
			ag := startACPPeer(b, bin, []string{"AGENTPOOL_DEMO_SCRIPT=" + string(js)}, repo, "demo-agent")
			if _, err := ag.conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			if _, err := ag.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: repo, McpServers: []acp.McpServer{}}); err != nil {
				b.Fatal(err)
			}
			agentNews = append(agentNews, time.Since(t0))
			agentColds = append(agentColds, time.Since(spawn))
			ag.stop()
			b.StartTimer()
		}
		// Without a spare: through agentpool acp, then its parts alone.
		for j := range perIter {
			b.StopTimer()
			time.Sleep(editorPause / 4) // the previous session's agent is gone
			b.StartTimer()
			start := time.Now()
			res, err := coldEd.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: repo, McpServers: []acp.McpServer{}})
			if err != nil {
				b.Fatal(err)
			}
			coldNews = append(coldNews, time.Since(start))
			coldChunks = append(coldChunks, promptChunkAt(b, coldEd, res.SessionId).Sub(start))
			b.StopTimer()
			if _, err := client.CloseSession(ctx, string(res.SessionId), true); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			wt, err := wtm.Create(ctx, fmt.Sprintf("bench-%d-%d", i, j), repo, "")
			if err != nil {
				b.Fatal(err)
			}
			trees = append(trees, time.Since(t0))
			if _, err := wtm.Remove(ctx, wt, true); err != nil {
				b.Fatal(err)
			}
			spawn := time.Now()
			ag := startACPPeer(b, bin, []string{"AGENTPOOL_DEMO_SCRIPT=" + string(js)}, repo, "demo-agent")
			ag.chunks = make(chan acp.SessionId, 1)
			if _, err := ag.conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
				b.Fatal(err)
			}
			an, err := ag.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: repo, McpServers: []acp.McpServer{}})
			if err != nil {
				b.Fatal(err)
			}
			agentColdChunks = append(agentColdChunks, promptChunkAt(b, ag, an.SessionId).Sub(spawn))
			ag.stop()
			b.StartTimer()
		}
	}
	b.StopTimer()
	slices.Sort(news)
	slices.Sort(ratios)
	b.ReportMetric(ms(news[len(news)/2]), "new_p50_ms")
	b.ReportMetric(ms(news[(len(news)*99)/100]), "new_p99_ms")
	b.ReportMetric(ms(median(firsts)), "first_chunk_ms")
	b.ReportMetric(ms(median(warms)), "warm_chunk_ms")
	b.ReportMetric(ratios[len(ratios)/2], "ratio_first")
	slices.Sort(idleRatios)
	b.ReportMetric(ms(median(idleWarms)), "idle_warm_chunk_ms")
	b.ReportMetric(idleRatios[len(idleRatios)/2], "ratio_first_idle")
	b.ReportMetric(ms(median(agentNews)), "agent_new_p50_ms")
	b.ReportMetric(ms(median(agentColds)), "agent_cold_p50_ms")
	b.ReportMetric(ms(median(coldNews)), "nospare_new_p50_ms")
	b.ReportMetric(ms(median(coldChunks)), "nospare_chunk_p50_ms")
	b.ReportMetric(ms(median(agentColdChunks)), "agent_cold_chunk_p50_ms")
	b.ReportMetric(ms(median(trees)), "worktree_p50_ms")
	b.ReportMetric(ms(median(coldChunks)-median(agentColdChunks)-median(trees)), "nospare_overhead_ms")
}

// editorPause is how long after the thread opens (and between prompts,
// for the idle warm prompt) a person takes to type a prompt, in
// BenchmarkACPFaceSessionNew.
const editorPause = time.Second

// promptFirstChunk prompts session through the editor and returns the
// time to its first agent message chunk, once the turn has ended.
func promptFirstChunk(b *testing.B, ed *acpEditor, session acp.SessionId) time.Duration {
	b.Helper()
	start := time.Now()
	return promptChunkAt(b, ed, session).Sub(start)
}

// promptChunkAt prompts session through the editor (or agent) and
// returns when its first agent message chunk came, once the turn has
// ended.
func promptChunkAt(b *testing.B, ed *acpEditor, session acp.SessionId) time.Time {
	b.Helper()
	for len(ed.chunks) > 0 {
		<-ed.chunks
	}
	done := make(chan error, 1)
	go func() {
		_, err := ed.conn.Prompt(context.Background(), acp.PromptRequest{SessionId: session, Prompt: []acp.ContentBlock{acp.TextBlock("go")}})
		done <- err
	}()
	var first time.Time
	for first.IsZero() {
		select {
		case id := <-ed.chunks:
			if id == session {
				first = time.Now()
			}
		case err := <-done:
			b.Fatalf("the prompt ended before its first chunk: %v", err)
		case <-time.After(20 * time.Second):
			b.Fatal("no chunk within 20 s")
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return first
}
