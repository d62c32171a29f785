package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/mcpshare/mcpsharetest"
	acp "github.com/coder/acp-go-sdk"
)

// TestACPUpdatesReachEditor: everything an agent says reaches the
// editor as ACP through `agentpool acp` (thoughts, message chunks, a tool
// call with its diff and locations and its update, a plan, usage, session
// info, its commands, mode and options as it changes them), while
// `agentpool events --follow` shows the editor's turn live; the options,
// mode and commands of a session's agent reach the editor once it has
// started (a session made without a spare, an agent switched to), not
// only when the agent changes them.
func TestACPUpdatesReachEditor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"main.go": "package main\n"})
	update := func(s string) agenttest.Step { return agenttest.Step{Update: json.RawMessage(s)} }
	rich := agenttest.Script{
		AgentName: "rich",
		Modes:     []agenttest.Mode{{ID: "default", Name: "Default"}, {ID: "plan", Name: "Plan"}},
		ConfigOptions: json.RawMessage(`[{"id":"model","name":"Model","category":"model","type":"select","currentValue":"fast",
			"options":[{"value":"fast","name":"Fast"},{"value":"smart","name":"Smart"}]}]`),
		Commands: []agenttest.Command{{Name: "help", Description: "Show help"}},
		Turns: []agenttest.Turn{{Steps: []agenttest.Step{
			{Thought: "pondering"},
			{Chunk: "rich answers."},
			update(`{"sessionUpdate":"plan","entries":[{"content":"edit main.go","priority":"high","status":"in_progress"}]}`),
			update(`{"sessionUpdate":"tool_call","toolCallId":"edit-9","title":"Edit main.go","kind":"edit","status":"pending",
				"locations":[{"path":"main.go","line":1}],
				"content":[{"type":"diff","path":"main.go","oldText":"package main\n","newText":"package main // edited\n"}]}`),
			update(`{"sessionUpdate":"tool_call_update","toolCallId":"edit-9","status":"completed"}`),
			update(`{"sessionUpdate":"usage_update","used":1234,"size":200000}`),
			update(`{"sessionUpdate":"session_info_update","title":"Rich work"}`),
			update(`{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"help","description":"Show help"},{"name":"review","description":"Review"}]}`),
			update(`{"sessionUpdate":"current_mode_update","currentModeId":"plan"}`),
			update(`{"sessionUpdate":"config_option_update","configOptions":[{"id":"model","name":"Model","category":"model","type":"select","currentValue":"smart",
				"options":[{"value":"fast","name":"Fast"},{"value":"smart","name":"Smart"}]}]}`),
			// The daemon's rules answer these: read is allowed by
			// default, execute denied by rich's own rule. Neither asks
			// the editor.
			{Permission: &agenttest.Permission{ToolCall: agenttest.ToolCall{ID: "look-1", Title: "Look around", Kind: "read"},
				Allowed: []agenttest.Step{{Chunk: " read ok."}}, Rejected: []agenttest.Step{{Chunk: " read refused."}}}},
			{Permission: &agenttest.Permission{ToolCall: agenttest.ToolCall{ID: "run-1", Title: "Run rm", Kind: "execute"},
				Allowed: []agenttest.Step{{Chunk: " ran."}}, Rejected: []agenttest.Step{{Chunk: " run refused."}}}},
			{Chunk: " done."},
		}}},
	}
	other := agenttest.Script{
		AgentName: "other",
		Modes:     []agenttest.Mode{{ID: "ask", Name: "Ask"}, {ID: "code", Name: "Code"}},
		ConfigOptions: json.RawMessage(`[{"id":"effort","name":"Effort","type":"select","currentValue":"low",
			"options":[{"value":"low","name":"Low"},{"value":"high","name":"High"}]}]`),
		Commands: []agenttest.Command{{Name: "explain", Description: "Explain"}},
		Turns:    []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "other speaks."}}}},
	}
	writeScripted(t, home, bin, map[string]any{"rich": rich, "other": other})
	setProviderField(t, home, "rich", "permissions", map[string]string{"execute": "deny"})
	d := startDaemon(t, bin, home, "AGENTPOOL_WORKTREES="+filepath.Join(t.TempDir(), "trees"))
	d.stopAtCleanup()
	for _, id := range []string{"rich", "other"} {
		waitProviderReady(t, d, id)
	}

	ed := startEditor(t, bin, home, repo, "--agent", "rich")
	ed.initialize()
	newRes, err := ed.conn.NewSession(ed.ctx(), acp.NewSessionRequest{Cwd: repo, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	id := newRes.SessionId
	// No spare: the agent starts after session/new is answered. Its
	// options, mode and commands follow once it is ready.
	ed.waitUpdate(id, 0, "config_option_update with rich's model once it started", func(u acp.SessionUpdate) bool {
		return u.ConfigOptionUpdate != nil && optionOf(u.ConfigOptionUpdate.ConfigOptions, "model") != nil
	})
	ed.waitUpdate(id, 0, "available commands with rich's help", func(u acp.SessionUpdate) bool {
		return u.AvailableCommandsUpdate != nil && slices.Contains(commandNames(u), "help") && slices.Contains(commandNames(u), "diff")
	})

	// agentpool events --follow shows the editor's turn live.
	follow := startEventsFollow(t, bin, home, string(id))

	n := ed.count()
	res, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("edit it")}})
	if err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt = %+v, %v; want end_turn", res, err)
	}
	got := ed.since(id, n)
	if text := agentText(got); text != "(pondering)rich answers.permission: allow_once read ok.permission: reject_once run refused. done." {
		t.Errorf("streamed text %q; want the thought, the chunks, the read allowed and the run refused by the daemon's rules", text)
	}
	ed.mu.Lock()
	asked := ed.asked
	ed.mu.Unlock()
	if asked != 0 {
		t.Errorf("the editor was asked %d permissions; want none (the daemon's rules answered both)", asked)
	}
	var call *acp.SessionUpdateToolCall
	for _, u := range got {
		if u.ToolCall != nil && u.ToolCall.ToolCallId == "edit-9" {
			call = u.ToolCall
		}
	}
	if call == nil || len(call.Locations) != 1 || call.Locations[0].Path != "main.go" || call.Locations[0].Line == nil || *call.Locations[0].Line != 1 ||
		len(call.Content) != 1 || call.Content[0].Diff == nil || call.Content[0].Diff.NewText != "package main // edited\n" ||
		call.Content[0].Diff.OldText == nil || *call.Content[0].Diff.OldText != "package main\n" {
		t.Errorf("tool call edit-9 = %s; want its location main.go:1 and its diff", describeUpdates([]acp.SessionUpdate{{ToolCall: call}}))
	}
	checks := []struct {
		what  string
		match func(acp.SessionUpdate) bool
	}{
		{"tool_call_update edit-9 completed", func(u acp.SessionUpdate) bool {
			return u.ToolCallUpdate != nil && u.ToolCallUpdate.ToolCallId == "edit-9" && u.ToolCallUpdate.Status != nil && *u.ToolCallUpdate.Status == "completed"
		}},
		{"plan", func(u acp.SessionUpdate) bool {
			return u.Plan != nil && len(u.Plan.Entries) == 1 && u.Plan.Entries[0].Content == "edit main.go"
		}},
		{"usage_update", func(u acp.SessionUpdate) bool {
			return u.UsageUpdate != nil && u.UsageUpdate.Used == 1234 && u.UsageUpdate.Size == 200000
		}},
		{"session_info_update", func(u acp.SessionUpdate) bool {
			return u.SessionInfoUpdate != nil && u.SessionInfoUpdate.Title != nil && *u.SessionInfoUpdate.Title == "Rich work"
		}},
		{"available_commands_update with review and the pool's", func(u acp.SessionUpdate) bool {
			return u.AvailableCommandsUpdate != nil && slices.Contains(commandNames(u), "review") && slices.Contains(commandNames(u), "merge")
		}},
		{"current_mode_update plan", func(u acp.SessionUpdate) bool {
			return u.CurrentModeUpdate != nil && u.CurrentModeUpdate.CurrentModeId == "plan"
		}},
		{"config_option_update with model smart and Agent", func(u acp.SessionUpdate) bool {
			if u.ConfigOptionUpdate == nil {
				return false
			}
			m := optionOf(u.ConfigOptionUpdate.ConfigOptions, "model")
			return m != nil && m.CurrentValue == "smart" && optionOf(u.ConfigOptionUpdate.ConfigOptions, "agent") != nil
		}},
	}
	for _, c := range checks {
		ed.waitUpdate(id, n, c.what, c.match)
	}
	follow.waitFor(t, "the editor's prompt as turn.started", func(ev backends.Event) bool {
		return ev.Type == backends.EventTurnStarted && strings.Contains(string(ev.Data), "edit it")
	})
	follow.waitFor(t, "rich's chunk", func(ev backends.Event) bool {
		return ev.Type == backends.EventMessageChunk && strings.Contains(string(ev.Data), "rich answers.")
	})
	follow.waitFor(t, "the turn's end", func(ev backends.Event) bool { return ev.Type == backends.EventTurnEnded })

	// Switched to other: once it has started, its own options, mode and
	// commands replace rich's in the editor.
	set, err := ed.conn.SetSessionConfigOption(ed.ctx(), acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
		SessionId: id, ConfigId: "agent", Value: "other"}})
	if err != nil || optionOf(set.ConfigOptions, "agent").CurrentValue != "other" {
		t.Fatalf("choosing other = %+v, %v", set, err)
	}
	if optionOf(set.ConfigOptions, "model") != nil {
		t.Errorf("options after choosing other = %s; want rich's model gone", describeOptions(set.ConfigOptions))
	}
	n = ed.count()
	if res, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("and you?")}}); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt to other = %+v, %v", res, err)
	}
	if text := agentText(ed.since(id, n)); text != "other speaks." {
		t.Errorf("other's turn streamed %q", text)
	}
	ed.waitUpdate(id, n, "config_option_update with other's effort", func(u acp.SessionUpdate) bool {
		if u.ConfigOptionUpdate == nil {
			return false
		}
		e := optionOf(u.ConfigOptionUpdate.ConfigOptions, "effort")
		return e != nil && e.CurrentValue == "low" && optionOf(u.ConfigOptionUpdate.ConfigOptions, "model") == nil
	})
	ed.waitUpdate(id, n, "current_mode_update ask", func(u acp.SessionUpdate) bool {
		return u.CurrentModeUpdate != nil && u.CurrentModeUpdate.CurrentModeId == "ask"
	})
	ed.waitUpdate(id, n, "available commands with other's explain and not rich's review", func(u acp.SessionUpdate) bool {
		return u.AvailableCommandsUpdate != nil && slices.Contains(commandNames(u), "explain") && !slices.Contains(commandNames(u), "review")
	})
	follow.waitFor(t, "the second prompt, sent to other", func(ev backends.Event) bool {
		return ev.Type == backends.EventTurnStarted && ev.Agent == "other" && strings.Contains(string(ev.Data), "and you?")
	})
	ed.stop()
}

// commandNames are the names of an available_commands_update.
func commandNames(u acp.SessionUpdate) []string {
	var out []string
	for _, c := range u.AvailableCommandsUpdate.AvailableCommands {
		out = append(out, c.Name)
	}
	return out
}

// describeOptions is opts as JSON, for messages.
func describeOptions(opts []acp.SessionConfigOption) string {
	b, _ := json.Marshal(opts)
	return string(b)
}

// eventsFollow is a running `agentpool events --follow --json`.
type eventsFollow struct {
	mu     sync.Mutex
	events []backends.Event
}

// startEventsFollow runs `agentpool events SESSION --follow --json`
// against the daemon of home until the test ends.
func startEventsFollow(t *testing.T, bin, home, session string) *eventsFollow {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "events", session, "--follow", "--json")
	cmd.Env = append(cmd.Environ(), "AGENTPOOL_HOME="+home)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &eventsFollow{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			var ev backends.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				f.mu.Lock()
				f.events = append(f.events, ev)
				f.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = cmd.Wait()
	})
	return f
}

// waitFor waits for an event that match accepts.
func (f *eventsFollow) waitFor(t *testing.T, what string, match func(backends.Event) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		f.mu.Lock()
		ok := slices.ContainsFunc(f.events, match)
		f.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var types []string
	for _, ev := range f.events {
		types = append(types, string(ev.Type)+"/"+ev.Agent)
	}
	t.Fatalf("agentpool events --follow: no %s within 20 s; it printed %v", what, types)
}

// TestACPEditorMCPServersShared: the MCP servers an editor gives in
// session/new follow the shared servers' rules: two threads naming the
// same stdio server reach one copy of it, which the daemon runs; its
// secret env is never shown.
func TestACPEditorMCPServersShared(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# r\n"})
	writeScripted(t, home, bin, map[string]any{"caller": agenttest.Script{MCPHTTP: true, Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{MCPCall: &agenttest.MCPCall{Tool: "echo", Args: map[string]any{"text": "hi"}}}}}}}})
	// No --agent: the agent of new threads is providers.json's
	// default_agent.
	setDefaultAgent(t, home, "caller")
	d := startDaemon(t, bin, home, "AGENTPOOL_WORKTREES="+filepath.Join(t.TempDir(), "trees"))
	d.stopAtCleanup()
	waitProviderReady(t, d, "caller")
	def := mcpsharetest.Definition("", "notes", 0)
	def.Env["NOTES_TOKEN"] = "s3cret-DDDD4444"
	server := acp.McpServer{Stdio: &acp.McpServerStdio{Name: "notes", Command: def.Command, Args: def.Args, Env: []acp.EnvVariable{}}}
	for k, v := range def.Env {
		server.Stdio.Env = append(server.Stdio.Env, acp.EnvVariable{Name: k, Value: v})
	}

	ed := startEditor(t, bin, home, repo)
	ed.initialize()
	pids := map[string]bool{}
	var ids []acp.SessionId
	for range 2 {
		res, err := ed.conn.NewSession(ed.ctx(), acp.NewSessionRequest{Cwd: repo, McpServers: []acp.McpServer{server}})
		if err != nil {
			t.Fatalf("session/new: %v", err)
		}
		if o := optionOf(res.ConfigOptions, "agent"); o == nil || o.CurrentValue != "caller" {
			t.Errorf("Agent of a new thread without --agent = %+v; want caller, providers.json's default_agent", o)
		}
		n := ed.count()
		if r, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: res.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("call it")}}); err != nil || r.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("prompt = %+v, %v", r, err)
		}
		var got *agenttest.MCPCalled
		for _, u := range ed.since(res.SessionId, n) {
			if u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil {
				if c, ok := agenttest.ParseMCPCalled(u.AgentMessageChunk.Content.Text.Text); ok {
					got = &c
				}
			}
		}
		if got == nil || got.Error != "" || !strings.HasSuffix(got.Text, ": hi") {
			t.Fatalf("the editor's server answered %+v; want its echo", got)
		}
		pid, _, _ := strings.Cut(got.Text, ":")
		pids[pid] = true
		ids = append(ids, res.SessionId)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := d.client.MCPShares(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 1 || len(st) != 1 || st[0].Clients != 2 || st[0].Calls != 2 {
		t.Errorf("answering pids %v, GET /v1/mcp/shared = %+v; want one shared copy with the two threads' agents as clients", pids, st)
	}
	for _, path := range []string{"/v1/sessions/" + string(ids[0]), "/v1/mcp/shared"} {
		if body := d.rawGet(path); strings.Contains(body, "s3cret-DDDD4444") {
			t.Errorf("GET %s shows the editor's server's secret", path)
		}
	}
	evs, err := d.client.EventLog(ctx, string(ids[1]), 0)
	if b, _ := json.Marshal(evs); err != nil || strings.Contains(string(b), "s3cret-DDDD4444") {
		t.Errorf("the session's events (%v) show the editor's server's secret", err)
	}
	ed.stop()
}

// setDefaultAgent sets providers.json's default_agent in home.
func setDefaultAgent(t *testing.T, home, id string) {
	t.Helper()
	editProviders(t, home, func(doc map[string]any) { doc["default_agent"] = id }) // diskloss_e2e_test.go
}
