package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/pty"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	"github.com/agentpool/agentpool/worktree"
)

// TestEventLineEveryType: `agentpool events` shows every event type the
// daemon emits as a readable summary, never truncated raw JSON, with data
// made by the types that emit it; setup steps that succeeded do not read
// as failures.
func TestEventLineEveryType(t *testing.T) {
	code0, code2 := 0, 2
	sig := "SIGKILL"
	used, size := int64(5000), int64(200000)
	setup := func(ev worktree.SetupEvent) any { return ev } // as internal/wiring publishes it
	for _, tc := range []struct {
		typ  backends.EventType
		data any
		want string
	}{
		{backends.EventSessionCreated, map[string]any{"repo": "/src/app", "worktree": "/h/worktrees/s-1", "branch": "agentpool/s-1", "base_commit": "0123456789abcdef", "agent": "demo", "warm": true}, "branch agentpool/s-1 from 0123456789ab of /src/app"},
		{backends.EventSessionCreated, map[string]any{"repo": "/src/app", "branch": "agentpool/sp-1", "base_commit": "0123456789abcdef", "agent": "demo", "warm": true, "spare": true, "forked_from": "s-0"}, "agent demo already running (a spare); a fork of s-0"},
		{pool.EventSessionForked, map[string]any{"from": "s-0", "turn": 0, "events": 16, "turns": 2, "files_ms": 23.4}, "forked from s-0 as it was: 2 turns and 16 events copied above; files copied in 23 ms"},
		{backends.EventSessionClosed, map[string]any{"worktree": pool.RemoveResult{Branch: "agentpool/s-1", Committed: true, Commit: "fedcba9876543210"}, "discard": false}, "commit fedcba987654 on branch agentpool/s-1"},
		{pool.EventSessionMerged, pool.MergeResult{Session: "s-1", Branch: "agentpool/s-1", Into: "main", Method: "fast-forward", Commits: []pool.MergeCommit{{}}, Head: "aaaabbbbccccdddd"}, "merged into main (fast-forward, 1 commit)"},
		{backends.EventAgentStarting, map[string]any{"provider": "demo", "kind": "acp", "resume": "", "restarts": 0, "warm_up": true}, "starting (acp), warming up"},
		{backends.EventAgentReady, map[string]any{"pid": 42}, "pid 42"},
		{backends.EventAgentExited, backends.ExitData{PID: 42, Status: "exit status 1", StderrTail: "boom"}, "exit status 1"},
		{backends.EventAgentContextLost, map[string]string{"previous_session_id": "a", "new_session_id": "b", "reason": "session not found"}, "could not be resumed, a new one started: session not found"},
		{pool.EventAgentWarmSkipped, map[string]string{"reason": "all slots busy"}, "not started ahead of the first prompt: all slots busy"},
		{"agent.evicted", map[string]any{"reason": "idle", "idle_for": "15m0s"}, "stopped: idle for 15m0s"},
		{backends.EventTurnStarted, map[string]any{"turn": 1, "prompt": "fix the tests"}, "fix the tests"},
		{pool.EventTurnQueued, map[string]any{"turn": 2, "position": 1, "max_warm": 4}, "position 1 (all 4 slots busy)"},
		{pool.EventTurnDequeued, map[string]any{"turn": 2, "position": 1, "waited_ms": 1500}, "got a slot after 1.5s"},
		{backends.EventTurnEnded, map[string]any{"turn": 1, "stop_reason": "end_turn", "duration_ms": 2000}, "turn 1 ended: end_turn"},
		{backends.EventTurnEnded, map[string]any{"turn": 3, "stop_reason": "interrupted", "error": "the daemon stopped during the turn", "duration_ms": 17900},
			"turn 3 ended: interrupted after 17.9s: the daemon stopped during the turn"},
		{backends.EventMessageChunk, map[string]any{"role": "agent", "text": "hello"}, "agent: hello"},
		{backends.EventToolCall, map[string]any{"toolCallId": "t1", "title": "Read main.go", "kind": "read", "status": "pending"}, "Read main.go"},
		{backends.EventToolUpdate, map[string]any{"toolCallId": "t1", "status": "completed"}, "completed"},
		{backends.EventPlan, map[string]any{"entries": []map[string]string{{"content": "a", "status": "completed"}, {"content": "b", "status": "pending"}}}, "1 of 2 steps done"},
		{backends.EventCommands, map[string]any{"sessionUpdate": "available_commands_update", "availableCommands": []map[string]string{{"name": "init", "description": "x"}, {"name": "review"}}}, "2 commands: /init /review"},
		{backends.EventMode, map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": "plan"}, "plan"},
		{backends.EventConfig, map[string]any{"sessionUpdate": "config_option_update", "configOptions": []map[string]any{{"id": "model", "name": "Model", "currentValue": "fast"}}}, "Model=fast"},
		{backends.EventSessionInfo, map[string]any{"sessionUpdate": "session_info_update", "title": "Fixing tests"}, "title: Fixing tests"},
		{backends.EventUsage, map[string]any{"sessionUpdate": "usage_update", "used": used, "size": size}, "context 5000 of 200000 tokens (2%)"},
		{acp.EventUnknownUpdate, map[string]any{"sessionUpdate": "future_update", "x": 1}, "future_update"},
		{backends.EventPermissionRequest, map[string]any{"request": "r1", "title": "Write a.go", "risk": "medium"}, "request r1: Write a.go (risk: medium)"},
		{backends.EventPermissionResolved, map[string]any{"request": "r1", "decision": "allow_once", "decided_by": "user"}, "allow_once by user"},
		{backends.EventFSRead, acpfs.Op{Type: acpfs.OpRead, Path: "main.go", Bytes: 2048, Outcome: acpfs.OutcomeOK, Duration: time.Millisecond}, "read main.go (2.0 KiB)"},
		{backends.EventFSWrite, acpfs.Op{Type: acpfs.OpWrite, Path: "../x", Outcome: acpfs.OutcomeRefused, Error: "outside the worktree"}, "write ../x refused: outside the worktree"},
		{backends.EventTerminalCreated, acpfs.TerminalEvent{Type: acpfs.EventTerminalCreated, ID: "t1", Command: "go", Args: []string{"test", "./..."}, PID: 7}, "$ go test ./..."},
		{backends.EventTerminalExited, acpfs.TerminalEvent{Type: acpfs.EventTerminalExited, ID: "t1", Command: "go", Args: []string{"test"}, ExitCode: &code2, Duration: 3 * time.Second, Bytes: 100}, "go test exited 2 after 3s"},
		{backends.EventTerminalExited, acpfs.TerminalEvent{Type: acpfs.EventTerminalExited, Command: "sleep", Signal: &sig}, "sleep killed by SIGKILL"},
		{backends.EventPTYOutput, map[string]any{"data": "$ ls\n"}, "$ ls"},
		{backends.EventPTYScreen, pty.ScreenData{Text: "> ready", Cols: 80, Rows: 24}, "screen 80x24: > ready"},
		{backends.EventSandboxRefused, backends.SandboxEventData{Refused: []backends.SandboxNote{{Path: "/root", Entry: "read", Reason: "is your home directory"}}}, "refused"},
		{wiring.EventNetworkRefused, wiring.NetworkRefusal{Host: "evil.example", Port: 443, Reason: "not on the allow-list", Allow: "evil.example:443"},
			`network refused: evil.example:443 (not on the allow-list); allow it with "sandbox.network": [..., "evil.example:443"]`},
		{backends.EventError, map[string]any{"error": "agent crashed"}, "agent crashed"},
		{backends.EventMCP, backends.MCPData{Method: "session/new", Servers: []string{"files", "github"}, Skipped: []backends.MCPSkipped{{Name: "docs", Transport: "sse", Reason: "no sse"}}}, "MCP servers files, github; not docs (sse: no sse)"},
		{backends.EventHistory, map[string]any{"type": "message.chunk", "data": map[string]any{"role": "agent", "text": "earlier"}}, "(replayed) message.chunk agent: earlier"},
		{pool.EventSetupUntrusted, setup(worktree.SetupEvent{Kind: worktree.SetupUntrusted, File: "/src/app/.agentpool.json", SHA256: "abcdef0123456789", TrustCommand: "agentpool trust /src/app"}), "setup skipped"},
		{pool.EventSetupCopied, setup(worktree.SetupEvent{Kind: worktree.SetupCopied, File: "/src/app/.agentpool.json", Copied: []string{".env"}, Skipped: []worktree.SkippedCopy{{Path: "go.mod", Reason: "tracked"}}}), "setup copied 1 file from the main checkout (.env); skipped go.mod: tracked"},
		{pool.EventSetupStarted, setup(worktree.SetupEvent{Kind: worktree.SetupStarted, File: "/src/app/.agentpool.json", Command: []string{"make", "deps"}, Timeout: "5m0s"}), "setup command started: make deps"},
		{pool.EventSetupOutput, setup(worktree.SetupEvent{Kind: worktree.SetupOutput, Output: "fetching deps\n"}), "setup: fetching deps"},
		{pool.EventSetupEnded, setup(worktree.SetupEvent{Kind: worktree.SetupEnded, OK: true, ExitCode: &code0, Elapsed: 2 * time.Second}), "setup done in 2s"},
		{pool.EventSetupEnded, setup(worktree.SetupEvent{Kind: worktree.SetupEnded, ExitCode: &code2, Error: "exit status 2"}), "setup failed (exit status 2): exit status 2"},
		{httpapi.EventStreamEnd, httpapi.EndData{Reason: "session closed", LastSeq: 9}, "stream ended: session closed (last event #9)"},
		{httpapi.EventProviderChanged, registry.Change{Version: 2, Enabled: []string{"claude"}}, "enabled claude"},
		{httpapi.EventPoolStatus, httpapi.PoolStatus{}, "the pool's agents"},
	} {
		ev := backends.Event{Seq: 3, Time: time.Now(), Type: tc.typ, Agent: "demo", Data: backends.MustJSON(tc.data)}
		got := eventLine(ev)
		if !strings.Contains(got, tc.want) {
			t.Errorf("eventLine(%s) = %q; want it to contain %q", tc.typ, got, tc.want)
		}
		if regexp.MustCompile(`[{]"|"[A-Za-z_]+":`).MatchString(got) {
			t.Errorf("eventLine(%s) = %q; want a summary, not raw JSON", tc.typ, got)
		}
		if strings.Contains(got, "\n") {
			t.Errorf("eventLine(%s) = %q; want one line", tc.typ, got)
		}
		if tc.typ != pool.EventSetupEnded && strings.Contains(got, "fail") && !strings.Contains(tc.want, "fail") {
			t.Errorf("eventLine(%s) = %q; a step that succeeded reads as a failure", tc.typ, got)
		}
	}
	var raw map[string]any
	_ = json.Unmarshal(backends.MustJSON(worktree.SetupEvent{Kind: worktree.SetupStarted}), &raw)
	if _, ok := raw["ok"]; ok {
		t.Errorf("setup.started data = %v; want no \"ok\"", raw)
	}
}
