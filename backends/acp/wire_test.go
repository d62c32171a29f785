package acp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// sdkDir is the module directory of the ACP SDK, for its schema and example agent.
func sdkDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/coder/acp-go-sdk").Output()
	if err != nil {
		t.Fatalf("go list the ACP SDK: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// schemaDefs maps a method to the schema definitions of its params and result.
var schemaDefs = map[string][2]string{
	"initialize":                 {"InitializeRequest", "InitializeResponse"},
	"session/new":                {"NewSessionRequest", "NewSessionResponse"},
	"session/load":               {"LoadSessionRequest", "LoadSessionResponse"},
	"session/prompt":             {"PromptRequest", "PromptResponse"},
	"session/set_mode":           {"SetSessionModeRequest", "SetSessionModeResponse"},
	"session/set_config_option":  {"SetSessionConfigOptionRequest", "SetSessionConfigOptionResponse"},
	"session/cancel":             {"CancelNotification", ""},
	"session/update":             {"SessionNotification", ""},
	"session/request_permission": {"RequestPermissionRequest", "RequestPermissionResponse"},
	"fs/read_text_file":          {"ReadTextFileRequest", "ReadTextFileResponse"},
	"fs/write_text_file":         {"WriteTextFileRequest", "WriteTextFileResponse"},
	"terminal/create":            {"CreateTerminalRequest", "CreateTerminalResponse"},
	"terminal/output":            {"TerminalOutputRequest", "TerminalOutputResponse"},
	"terminal/wait_for_exit":     {"WaitForTerminalExitRequest", "WaitForTerminalExitResponse"},
	"terminal/kill":              {"KillTerminalRequest", "KillTerminalResponse"},
	"terminal/release":           {"ReleaseTerminalRequest", "ReleaseTerminalResponse"},
}

type wireLine struct {
	inbound bool
	raw     []byte
}

// Everything agentpool sends and receives in a rich session validates
// against the JSON schema shipped inside the SDK module.
func TestWireTrafficMatchesSchema(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "alpha\n")
	fs, err := acpfs.NewFS(acpfs.FSConfig{Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Close() })
	terms, err := acpfs.NewTerminals(acpfs.TerminalsConfig{Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []wireLine
	wire := func(in bool, l []byte) {
		mu.Lock()
		lines = append(lines, wireLine{in, append([]byte(nil), l...)})
		mu.Unlock()
	}
	allow := func(_ context.Context, req acp.PermissionRequest) (acp.PermissionOutcome, error) {
		return acp.PermissionOutcome{OptionID: req.Options[0].ID}, nil
	}
	s := agenttest.Script{
		MCPHTTP: true,
		Modes:   []agenttest.Mode{{ID: "ask", Name: "Ask"}, {ID: "code", Name: "Code"}},
		Turns: []agenttest.Turn{{Echo: true, Steps: []agenttest.Step{
			{Thought: "hmm"},
			{ToolCall: &agenttest.ToolCall{ID: "t1", Title: "Read", Kind: "read", Status: "pending", Locations: []string{"a.txt"}, RawInput: json.RawMessage(`{"p":1}`)}},
			{Read: &agenttest.FileOp{Path: "a.txt"}},
			{Read: &agenttest.FileOp{Path: "nope.txt"}},
			{ToolUpdate: &agenttest.ToolCall{ID: "t1", Status: "completed", Text: "ok"}},
			{Permission: &agenttest.Permission{ToolCall: agenttest.ToolCall{ID: "t2", Title: "Write", Kind: "edit"},
				Allowed: []agenttest.Step{{Write: &agenttest.FileOp{Path: "b.txt", Content: "beta"}}, {Write: &agenttest.FileOp{Path: "c.txt", Content: ""}}}}},
			{Terminal: &agenttest.Terminal{Command: "echo", Args: []string{"hi"}}},
			{Update: json.RawMessage(`{"sessionUpdate":"plan","entries":[{"content":"a","priority":"high","status":"pending"}]}`)},
			{Chunk: "done"},
		}}},
	}
	// MCP servers of each transport the agent takes: a stdio one without
	// arguments or environment (arrays, never null) and an http one.
	mcp := backends.MCPServers{"bare": {Command: "mcp-bare"}, "tools": {Command: "mcp-tools", Args: []string{"-v"}, Env: map[string]string{"K": "v"}},
		"remote": {Type: backends.MCPHTTP, URL: "https://mcp.example/", Headers: map[string]string{"Authorization": "Bearer x"}}}
	h := newBackend(t, s, acp.Config{Spec: backends.Spec{Dir: dir, MCPServers: mcp}, FS: fs, Terminals: terms, Permissions: allow, Wire: wire})
	h.start(t, "")
	if err := h.b.SetMode(context.Background(), "code"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(t, "go"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.b.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	c := jsonschema.NewCompiler()
	f, err := os.Open(filepath.Join(sdkDir(t), "schema", "schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("file:///acp/schema.json", doc); err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*jsonschema.Schema{}
	validate := func(def string, raw json.RawMessage) error {
		sch := schemas[def]
		if sch == nil {
			var err error
			if sch, err = c.Compile("file:///acp/schema.json#/$defs/" + def); err != nil {
				t.Fatalf("compile %s: %v", def, err)
			}
			schemas[def] = sch
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return err
		}
		return sch.Validate(inst)
	}
	methodOf := map[string]string{} // direction+id → method of the request
	mu.Lock()
	defer mu.Unlock()
	validated := map[string]int{}
	for _, l := range lines {
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  string          `json:"method"`
			Params  json.RawMessage `json:"params"`
			Result  json.RawMessage `json:"result"`
			Error   json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(l.raw, &m); err != nil || m.JSONRPC != "2.0" {
			t.Fatalf("line is not JSON-RPC 2.0: %s", l.raw)
		}
		if m.Method != "" {
			defs, ok := schemaDefs[m.Method]
			if !ok {
				t.Errorf("unexpected method %q", m.Method)
				continue
			}
			if err := validate(defs[0], m.Params); err != nil {
				t.Errorf("%s params do not match %s: %v\n%s", m.Method, defs[0], err, l.raw)
			}
			validated[defs[0]]++
			if len(m.ID) > 0 {
				methodOf[dirKey(l.inbound, m.ID)] = m.Method
			}
			continue
		}
		// A response travels the other way from its request.
		method := methodOf[dirKey(!l.inbound, m.ID)]
		if method == "" {
			t.Errorf("response to unknown request id %s", m.ID)
			continue
		}
		if len(m.Error) > 0 {
			continue
		}
		def := schemaDefs[method][1]
		if err := validate(def, m.Result); err != nil {
			t.Errorf("%s result does not match %s: %v\n%s", method, def, err, l.raw)
		}
		validated[def]++
	}
	for _, want := range []string{"InitializeRequest", "InitializeResponse", "NewSessionRequest", "PromptRequest", "PromptResponse",
		"SessionNotification", "RequestPermissionResponse", "ReadTextFileResponse", "WriteTextFileResponse", "CreateTerminalResponse",
		"TerminalOutputResponse", "WaitForTerminalExitResponse", "ReleaseTerminalResponse", "SetSessionModeRequest"} {
		if validated[want] == 0 {
			t.Errorf("no %s was validated; recorded traffic incomplete", want)
		}
	}
}

func dirKey(inbound bool, id json.RawMessage) string {
	if inbound {
		return "in:" + string(id)
	}
	return "out:" + string(id)
}

// buildExampleAgent builds the SDK's own example agent, a second opinion
// beside the scripted fake.
func buildExampleAgent(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "example-agent")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/coder/acp-go-sdk/example/agent")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the SDK example agent: %v\n%s", err, out)
	}
	return bin
}

func TestSDKExampleAgentFullTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the SDK example agent")
	}
	bin := buildExampleAgent(t)
	var asked []acp.PermissionRequest
	var mu sync.Mutex
	allow := func(_ context.Context, req acp.PermissionRequest) (acp.PermissionOutcome, error) {
		mu.Lock()
		asked = append(asked, req)
		mu.Unlock()
		for _, o := range req.Options {
			if o.Kind == "allow_once" {
				return acp.PermissionOutcome{OptionID: o.ID}, nil
			}
		}
		return acp.PermissionOutcome{Cancelled: true}, nil
	}
	rec := &recorder{}
	b, err := acp.New(acp.Config{
		Spec:        backends.Spec{Provider: "sdk-example", Kind: backends.KindACP, Path: bin, Dir: t.TempDir()},
		Permissions: allow, StopGrace: 500 * time.Millisecond, KillGrace: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(context.Background()) }()
	if _, err := b.Start(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	res, err := b.Prompt(context.Background(), backends.Prompt{Text: "hello"}, rec.add)
	if err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt = %+v, %v", res, err)
	}
	types := strings.Join(rec.types(), ",")
	for _, want := range []string{"message.chunk", "tool.call", "tool.update"} {
		if !strings.Contains(types, want) {
			t.Errorf("events %s lack %s", types, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 {
		t.Errorf("permission requests = %d; want 1", len(asked))
	}
	// Cancel mid-turn on the real SDK agent.
	ch := make(chan backends.TurnResult, 1)
	go func() { r, _ := b.Prompt(context.Background(), backends.Prompt{Text: "again"}, nil); ch <- r }()
	time.Sleep(300 * time.Millisecond)
	if err := b.Cancel(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.StopReason != backends.StopCancelled {
		t.Errorf("StopReason after cancel = %q; want cancelled", r.StopReason)
	}
}
