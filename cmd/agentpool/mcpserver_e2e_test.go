package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpScript is the scripted agent of the MCP tests: its first turn reads,
// asks to write notes.txt and writes the prompt there once allowed; its
// next turns stream text for about two seconds and edit notes.txt again.
func mcpScript() agenttest.Script {
	return agenttest.Script{Turns: []agenttest.Turn{
		{Steps: []agenttest.Step{
			{Chunk: "Looking at the repository. "},
			{ToolCall: &agenttest.ToolCall{ID: "read-1", Title: "Read README.md", Kind: "read", Status: "completed", Locations: []string{"README.md"}}},
			{Permission: &agenttest.Permission{
				ToolCall: agenttest.ToolCall{ID: "edit-1", Title: "Write notes.txt", Kind: "edit", Locations: []string{"notes.txt"}},
				Allowed: []agenttest.Step{
					{Write: &agenttest.FileOp{Path: "notes.txt", Content: "{{prompt}}\n"}},
					{Chunk: "Done: wrote notes.txt."},
				},
				Rejected: []agenttest.Step{{Chunk: "Refused: nothing written."}},
			}},
		}},
		{Steps: []agenttest.Step{
			{Chunks: 60, ChunksPerSecond: 30},
			{Write: &agenttest.FileOp{Path: "notes.txt", Content: "second: {{prompt}}\n"}},
			{Chunk: " Second turn done."},
		}},
	}}
}

// startMCPRig starts the built daemon with the provider "scripted"
// playing mcpScript, and `agentpool mcp` in a repository of its own; it
// returns the binary, the data directory, the repository, the daemon and
// the MCP client.
func startMCPRig(t *testing.T) (bin, home, repo string, d *daemon, c *mcpClient) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin = agentpoolBinary(t)
	home = t.TempDir()
	repo = e2eRepoAt(t, filepath.Join(t.TempDir(), "proj"), map[string]string{"README.md": "# proj\n"})
	writeScripted(t, home, bin, map[string]any{"scripted": mcpScript()})
	d = startDaemon(t, bin, home)
	d.stopAtCleanup()
	return bin, home, repo, d, startMCP(t, bin, home, repo)
}

// mcpClient is an MCP client session with `agentpool mcp`, started in dir
// against the daemon of home, and the progress notifications it got.
type mcpClient struct {
	t        *testing.T
	cs       *mcp.ClientSession
	stderr   *bytes.Buffer
	mu       sync.Mutex
	progress map[any][]string
}

// startMCP starts `agentpool mcp` through the SDK's own client.
func startMCP(t *testing.T, bin, home, dir string) *mcpClient {
	t.Helper()
	c := &mcpClient{t: t, stderr: &bytes.Buffer{}, progress: map[any][]string{}}
	client := mcp.NewClient(&mcp.Implementation{Name: "agentpool-e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.progress[req.Params.ProgressToken] = append(c.progress[req.Params.ProgressToken], req.Params.Message)
		},
	})
	cmd := exec.Command(bin, "mcp", "--log-level", "debug")
	cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home)
	cmd.Dir = dir
	cmd.Stderr = c.stderr
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to agentpool mcp: %v", err)
	}
	c.cs = cs
	t.Cleanup(func() {
		_ = cs.Close()
		if t.Failed() {
			t.Logf("agentpool mcp stderr:\n%s", c.stderr)
		}
	})
	return c
}

// call calls tool with args (and a progress token, if not nil) and
// returns its text and structured content; wantErr says whether the
// result must be a tool error.
func (c *mcpClient) call(tool string, args map[string]any, token any, wantErr bool) (string, map[string]any) {
	c.t.Helper()
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	if token != nil {
		p.SetProgressToken(token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := c.cs.CallTool(ctx, p)
	if err != nil {
		c.t.Fatalf("CallTool(%s, %v) protocol error = %v; want a result", tool, args, err)
	}
	var text strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if res.IsError != wantErr {
		c.t.Fatalf("CallTool(%s, %v) IsError = %v; want %v; text:\n%s", tool, args, res.IsError, wantErr, text.String())
	}
	var sc map[string]any
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &sc)
	}
	return text.String(), sc
}

// progressHas waits a little (notifications are handled apart from the
// result they precede) for a progress message for token containing want,
// and returns whether one came, with the messages.
func (c *mcpClient) progressHas(token any, want string) (bool, []string) {
	for range 200 {
		c.mu.Lock()
		got := slices.Clone(c.progress[token])
		c.mu.Unlock()
		if slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, want) }) {
			return true, got
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return false, slices.Clone(c.progress[token])
}

func TestMCPServerEndToEnd(t *testing.T) {
	_, _, repo, _, c := startMCPRig(t)

	ctx := context.Background()
	tools, err := c.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
	}
	for _, want := range []string{"list_providers", "list_sessions", "get_session", "create_session", "prompt", "wait_turn", "cancel_turn",
		"get_diff", "list_permissions", "answer_permission", "merge_session", "close_session", "start_attempts", "get_attempts", "list_attempts", "pick_attempt"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools = %v; want %s among them", names, want)
		}
	}

	text, _ := c.call("list_providers", nil, nil, false)
	if !strings.Contains(text, "- scripted (scripted, acp): ") {
		t.Errorf("list_providers text lacks the scripted provider:\n%s", text)
	}

	// No repo: the directory the MCP client started the server in.
	text, sc := c.call("create_session", map[string]any{"agent": "scripted", "title": "from mcp"}, nil, false)
	id, _ := sc["id"].(string)
	if id == "" || sc["repo"] != repo || !strings.Contains(text, "Created session "+id) {
		t.Fatalf("create_session = %q, %v; want a session of %s", text, sc, repo)
	}

	text, sc = c.call("prompt", map[string]any{"session": id, "text": "hello from the parent"}, nil, false)
	if sc["turn"] != float64(1) || !strings.Contains(text, "wait_turn") {
		t.Fatalf("prompt = %q, %v; want turn 1 and the next step", text, sc)
	}

	// The agent asks a permission: the wait returns it.
	text, sc = c.call("wait_turn", map[string]any{"session": id, "turn": 1}, "wait-1", false)
	perms, _ := sc["permissions"].([]any)
	if sc["state"] != "waiting_for_permission" || len(perms) != 1 || !strings.Contains(text, "Write notes.txt") {
		t.Fatalf("wait_turn = %q, %v; want the permission request to write notes.txt", text, sc)
	}
	req, _ := perms[0].(map[string]any)["id"].(string)
	text, _ = c.call("list_permissions", map[string]any{"session": id}, nil, false)
	if !strings.Contains(text, "request "+req) || !strings.Contains(text, "allow_once") {
		t.Errorf("list_permissions = %q; want request %s with its choices", text, req)
	}
	c.call("answer_permission", map[string]any{"session": id, "request": req, "choice": "allow_once"}, nil, false)

	text, sc = c.call("wait_turn", map[string]any{"session": id, "turn": 1}, "wait-2", false)
	if sc["state"] != "ended" || sc["stop_reason"] != "end_turn" {
		t.Fatalf("wait_turn after the answer = %q, %v; want the ended turn", text, sc)
	}
	for _, want := range []string{"The agent's final text:\nLooking at the repository.\npermission: allow_once\nDone: wrote notes.txt.\n", "notes.txt +1", "It changed 1 file"} {
		if !strings.Contains(text, want) {
			t.Errorf("wait_turn text lacks %q:\n%s", want, text)
		}
	}
	if ok, p := c.progressHas("wait-1", "tool call 1: Read README.md"); !ok {
		t.Errorf("progress of the first wait = %q; want the tool call", p)
	}
	if ok, p := c.progressHas("wait-2", "turn 1 ended: end_turn"); !ok {
		t.Errorf("progress of the second wait = %q; want the end", p)
	}

	// A turn longer than the wait: "running", then the end, with
	// progress as the text streams.
	c.call("prompt", map[string]any{"session": id, "text": "more"}, nil, false)
	text, sc = c.call("wait_turn", map[string]any{"session": id, "timeout_seconds": 1}, "wait-3", false)
	if sc["state"] != "running" || sc["turn"] != float64(2) || !strings.Contains(text, "Call wait_turn again") {
		t.Fatalf("short wait_turn = %q, %v; want turn 2 still running", text, sc)
	}
	if ok, p := c.progressHas("wait-3", "the agent is writing"); !ok {
		t.Errorf("progress of the short wait = %q; want the streamed text counted", p)
	}
	deadline := time.Now().Add(60 * time.Second)
	for sc["state"] == "running" && time.Now().Before(deadline) {
		text, sc = c.call("wait_turn", map[string]any{"session": id, "turn": 2}, nil, false)
	}
	if sc["state"] != "ended" || !strings.HasSuffix(strings.TrimSpace(text[:strings.Index(text, "Next:")]), "Second turn done.") {
		t.Fatalf("wait_turn of turn 2 = %q, %v; want it ended with its final text", text, sc)
	}

	text, _ = c.call("get_diff", map[string]any{"session": id}, nil, false)
	if !strings.Contains(text, "+second: more") || !strings.Contains(text, "A notes.txt") && !strings.Contains(text, "added notes.txt") {
		t.Errorf("get_diff = %q; want notes.txt and its content", text)
	}

	// A daemon refusal is a tool error carrying its message.
	text, _ = c.call("wait_turn", map[string]any{"session": "no-such-session", "turn": 1}, nil, true)
	if !strings.Contains(text, "no-such-session") || !strings.Contains(text, "not_found") {
		t.Errorf("wait_turn of an unknown session = %q; want the daemon's not found", text)
	}
	text, _ = c.call("create_session", map[string]any{"agent": "no-such-agent", "repo": repo}, nil, true)
	if !strings.Contains(text, "no-such-agent") {
		t.Errorf("create_session of an unknown agent = %q; want the daemon's message naming it", text)
	}

	text, _ = c.call("merge_session", map[string]any{"session": id}, nil, false)
	if !strings.Contains(text, "Merged") {
		t.Errorf("merge_session = %q", text)
	}
	if got := e2eGit(t, repo, "show", "main:notes.txt"); got != "second: more\n" {
		t.Errorf("main:notes.txt after merge_session = %q; want the session's work", got)
	}
	text, _ = c.call("close_session", map[string]any{"session": id}, nil, false)
	if !strings.Contains(text, "Closed session "+id) {
		t.Errorf("close_session = %q", text)
	}
	text, _ = c.call("list_sessions", nil, nil, false)
	if strings.Contains(text, id) {
		t.Errorf("list_sessions after close = %q; want no open session", text)
	}
	text, _ = c.call("prompt", map[string]any{"session": id, "text": "again"}, nil, true)
	if !strings.Contains(text, "agentpool refused") {
		t.Errorf("prompt of a closed session = %q; want the daemon's refusal", text)
	}

	// A session created with its first prompt (one request to the
	// daemon), waited for: the turn stops at its permission request.
	text, sc = c.call("create_session", map[string]any{"agent": "scripted", "prompt": "hello", "wait_seconds": 50}, nil, false)
	first, _ := sc["first_turn"].(map[string]any)
	if !strings.Contains(text, "Created session ") || !strings.Contains(text, "Started turn 1 of session") ||
		first == nil || first["state"] != "waiting_for_permission" {
		t.Errorf("create_session with a prompt = %q, %v; want the session and its first turn waiting for the permission", text, sc)
	}
}
