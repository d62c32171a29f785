package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// tsStep is one line the TypeScript client (testdata/acpclient/client.mjs)
// prints: a step, whether it succeeded, and what it saw.
type tsStep struct {
	Step  string `json:"step"`
	OK    bool   `json:"ok"`
	Error *struct {
		Code    *int            `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	Result           json.RawMessage `json:"result"`
	Updates          tsUpdates       `json:"updates"`
	Late             tsUpdates       `json:"late"`
	Permissions      []tsPermission  `json:"permissions"`
	ConnectionClosed bool            `json:"connectionClosed"`
	Exit             *struct {
		Code   *int    `json:"code"`
		Signal *string `json:"signal"`
	} `json:"exit"`
	FSCalls []json.RawMessage `json:"fsCalls"`
}

// tsUpdates summarises the session/update notifications of a step.
type tsUpdates struct {
	Kinds     []string          `json:"kinds"`
	Text      map[string]string `json:"text"` // chunk kind → concatenated text
	ToolCalls []tsToolCall      `json:"toolCalls"`
	Commands  []string          `json:"commands"` // of the last available_commands_update
	Sessions  []string          `json:"sessions"`
}

// tsToolCall is a tool_call or tool_call_update among a step's updates.
type tsToolCall struct {
	Kind       string `json:"kind"`
	ToolCallID string `json:"toolCallId"`
	Title      string `json:"title"`
}

// tsPermission is a session/request_permission the client answered.
type tsPermission struct {
	SessionID string `json:"sessionId"`
	ToolCall  struct {
		ToolCallID string `json:"toolCallId"`
		Title      string `json:"title"`
	} `json:"toolCall"`
	Options []struct {
		OptionID string `json:"optionId"`
		Kind     string `json:"kind"`
	} `json:"options"`
	Chosen *string `json:"chosen"`
}

// tsConfigOption is a session config option as ACP shows it.
type tsConfigOption struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Type         string          `json:"type"`
	CurrentValue string          `json:"currentValue"`
	Options      json.RawMessage `json:"options"`
}

// values returns the values of a select option's choices, flat or grouped.
func (o tsConfigOption) values() []string {
	var flat []struct {
		Value   string `json:"value"`
		Options []struct {
			Value string `json:"value"`
		} `json:"options"`
	}
	_ = json.Unmarshal(o.Options, &flat)
	var vs []string
	for _, f := range flat {
		if f.Value != "" {
			vs = append(vs, f.Value)
		}
		for _, g := range f.Options {
			vs = append(vs, g.Value)
		}
	}
	return vs
}

// tsRun is one run of the TypeScript client: its steps by name, in order.
type tsRun struct {
	steps  map[string]tsStep
	order  []string
	stderr string
}

// step returns the step named name, failing the test when the client did
// not reach it or the step failed.
func (r tsRun) step(t *testing.T, name string) tsStep {
	t.Helper()
	s, ok := r.steps[name]
	if !ok {
		t.Fatalf("TS client: step %s did not run (steps: %v)\nclient and agentpool acp stderr:\n%s", name, r.order, r.stderr)
	}
	if !s.OK {
		b, _ := json.Marshal(s.Error)
		exit := ""
		if s.Exit != nil {
			e, _ := json.Marshal(s.Exit)
			exit = " (agentpool acp had exited: " + string(e) + ")"
		}
		t.Fatalf("TS client: step %s failed: %s%s\nclient and agentpool acp stderr:\n%s", name, b, exit, r.stderr)
	}
	return s
}

// runTSClient runs the TypeScript client with scenario against the daemon
// of home and returns what it printed; a step that failed is reported by
// step, not here.
func runTSClient(t *testing.T, c nodeClient, home, dir string, scenario map[string]any) tsRun {
	t.Helper()
	return runTSClientEnv(t, c, []string{"AGENTPOOL_HOME=" + home}, dir, scenario)
}

// runTSClientEnv is runTSClient with env added to the client's (and so
// agentpool acp's) environment.
func runTSClientEnv(t *testing.T, c nodeClient, env []string, dir string, scenario map[string]any) tsRun {
	t.Helper()
	arg, err := json.Marshal(scenario)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Node, c.Script, string(arg))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	run := tsRun{steps: map[string]tsStep{}, stderr: stderr.String()}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var s tsStep
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("TS client printed %q: %v", sc.Text(), err)
		}
		run.steps[s.Step] = s
		run.order = append(run.order, s.Step)
		t.Logf("TS client (%v): %s", scenario["mode"], sc.Bytes())
	}
	if s, ok := run.steps["script"]; ok {
		t.Fatalf("TS client failed outside a step: %s\n%s", s.Error.Message, run.stderr)
	}
	if runErr != nil && (len(run.order) == 0 || run.steps[run.order[len(run.order)-1]].OK) {
		t.Fatalf("TS client (mode %v): %v; steps %v\n%s", scenario["mode"], runErr, run.order, run.stderr)
	}
	return run
}

// TestACPFaceOfficialTSClient drives `agentpool acp` with a client nobody
// on this project wrote: the official TypeScript ACP SDK from npm (its
// ClientSideConnection), as an editor would. A first client process
// creates a session in a subdirectory of a repository, runs a prompt whose
// permission request it answers, switches the "Agent" option to a second
// provider and prompts again, lists the session, and is killed; a second
// process resumes the session; a third loads it (its history replayed)
// and closes it, which keeps its branch. Then requests an editor may get
// wrong are refused with errors that say what to do, leaving nothing
// half-created, and with no daemon initialize says how to start one.
func TestACPFaceOfficialTSClient(t *testing.T) {
	client := installNodeClient(t, "acpclient", "client.mjs")
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "proj"), map[string]string{"README.md": "# proj\n"})
	cwd := filepath.Join(repo, "web", "app") // an editor opened on a subdirectory
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e2eGit(t, repo, "add", ".")
	e2eGit(t, repo, "commit", "-q", "-m", "app")
	writeScripted(t, home, bin, map[string]any{
		"alpha": agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
			{Chunk: "alpha: looking. "},
			{ToolCall: &agenttest.ToolCall{ID: "read-1", Title: "Read README.md", Kind: "read", Status: "completed", Locations: []string{"README.md"}}},
			{Permission: &agenttest.Permission{
				ToolCall: agenttest.ToolCall{ID: "edit-1", Title: "Write notes.txt", Kind: "edit", Locations: []string{"notes.txt"}},
				Allowed: []agenttest.Step{
					{Write: &agenttest.FileOp{Path: "notes.txt", Content: "{{prompt}}\n"}},
					{Chunk: "alpha: wrote notes.txt."},
				},
				Rejected: []agenttest.Step{{Chunk: "alpha: refused."}},
			}},
		}}}},
		"beta": agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
			{Chunk: "beta: second opinion."},
		}}}},
		"slow": agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
			{Chunk: "slow: started."},
			{WaitCancel: true},
		}}}},
		"off": agenttest.Script{},
	})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	if _, err := d.client.SetProviderEnabled(ctx, "off", false); err != nil {
		t.Fatal(err)
	}
	// The Agent option lists the ready agents: those the daemon is still
	// probing at its start are left out until they are.
	for _, id := range []string{"alpha", "beta", "slow"} {
		waitProviderReady(t, d, id)
	}
	command := []string{bin, "acp", "--agent", "alpha"}
	prompts := []string{"note the plan", "what do you think?"}

	first := runTSClient(t, client, home, cwd, map[string]any{
		"mode": "first", "command": command, "cwd": cwd, "prompts": prompts, "switchTo": "beta", "choose": "allow_once",
		"mcpServers": []map[string]any{{"name": "notes", "command": "notes-mcp", "args": []string{"--stdio"},
			"env": []map[string]string{{"name": "NOTES_TOKEN", "value": "s3cret"}}}},
	})

	var init struct {
		ProtocolVersion int `json:"protocolVersion"`
		AgentInfo       struct {
			Name string `json:"name"`
		} `json:"agentInfo"`
		AgentCapabilities struct {
			LoadSession         bool                       `json:"loadSession"`
			SessionCapabilities map[string]json.RawMessage `json:"sessionCapabilities"`
		} `json:"agentCapabilities"`
	}
	tsUnmarshal(t, first.step(t, "initialize"), &init)
	if init.ProtocolVersion != 1 || init.AgentInfo.Name != "agentpool" || !init.AgentCapabilities.LoadSession {
		t.Errorf("initialize = %+v; want protocol 1, agentInfo.name agentpool, loadSession", init)
	}
	for _, c := range []string{"list", "resume", "close"} {
		if _, ok := init.AgentCapabilities.SessionCapabilities[c]; !ok {
			t.Errorf("initialize: sessionCapabilities = %v; want %s", tsKeys(init.AgentCapabilities.SessionCapabilities), c)
		}
	}

	var created struct {
		SessionID     string           `json:"sessionId"`
		ConfigOptions []tsConfigOption `json:"configOptions"`
	}
	newStep := first.step(t, "session/new")
	tsUnmarshal(t, newStep, &created)
	if cmds := append(newStep.Updates.Commands, newStep.Late.Commands...); !slices.Contains(cmds, "diff") || !slices.Contains(cmds, "merge") {
		t.Errorf("available commands after session/new = %v; want the pool's diff and merge among them", cmds)
	}
	id := created.SessionID
	agentOpt, ok := tsOption(created.ConfigOptions, "agent")
	if !ok || agentOpt.Name != "Agent" || agentOpt.Type != "select" || agentOpt.CurrentValue != "alpha" ||
		!slices.Contains(agentOpt.values(), "alpha") || !slices.Contains(agentOpt.values(), "beta") {
		t.Errorf("session/new configOptions = %+v; want agent (\"Agent\", a select of alpha and beta, alpha current)", created.ConfigOptions)
	}
	sess := tsPoolSession(t, d, id, repo)
	if m, ok := sess.MCPServers["notes"]; !ok || m.Command != "notes-mcp" || !slices.Equal(m.Args, []string{"--stdio"}) || m.Env["NOTES_TOKEN"] != backends.Redacted {
		t.Errorf("pool session's MCP servers = %+v; want the editor's notes server, its env redacted", sess.MCPServers)
	}

	p1 := first.step(t, "prompt-1")
	if got := tsStopReason(t, p1); got != "end_turn" {
		t.Errorf("prompt-1 stopReason = %q; want end_turn", got)
	}
	if len(p1.Permissions) != 1 || p1.Permissions[0].SessionID != id || p1.Permissions[0].ToolCall.Title != "Write notes.txt" ||
		p1.Permissions[0].Chosen == nil {
		t.Errorf("prompt-1 permission requests = %+v; want one for %s asking to write notes.txt, answered allow_once", p1.Permissions, id)
	}
	msg := p1.Updates.Text["agent_message_chunk"] + p1.Late.Text["agent_message_chunk"]
	if !strings.Contains(msg, "alpha: looking.") || !strings.Contains(msg, "alpha: wrote notes.txt.") || strings.Contains(msg, "refused") {
		t.Errorf("prompt-1 agent text = %q; want alpha's, after the allowed write", msg)
	}
	if !slices.ContainsFunc(p1.Updates.ToolCalls, func(c tsToolCall) bool {
		return c.Title == "Read README.md"
	}) {
		t.Errorf("prompt-1 tool calls = %+v; want Read README.md", p1.Updates.ToolCalls)
	}
	if !slices.Equal(p1.Updates.Sessions, []string{id}) {
		t.Errorf("prompt-1 updates for sessions %v; want only %s", p1.Updates.Sessions, id)
	}
	if len(p1.Late.Kinds) > 0 {
		t.Errorf("prompt-1: updates %v arrived after the prompt's answer; ACP wants them before", p1.Late.Kinds)
	}
	if b, err := os.ReadFile(filepath.Join(sess.Worktree.Path, "notes.txt")); err != nil || !strings.Contains(string(b), prompts[0]) {
		t.Errorf("notes.txt in the session's worktree = %q, %v; want the allowed write of the prompt", b, err)
	}

	var set struct {
		ConfigOptions []tsConfigOption `json:"configOptions"`
	}
	tsUnmarshal(t, first.step(t, "set_config_option"), &set)
	if o, ok := tsOption(set.ConfigOptions, "agent"); !ok || o.CurrentValue != "beta" {
		t.Errorf("set_config_option agent=beta answered %+v; want agent's current value beta", set.ConfigOptions)
	}

	p2 := first.step(t, "prompt-2")
	if got := tsStopReason(t, p2); got != "end_turn" {
		t.Errorf("prompt-2 stopReason = %q; want end_turn", got)
	}
	msg = p2.Updates.Text["agent_message_chunk"] + p2.Late.Text["agent_message_chunk"]
	if !strings.Contains(msg, "beta: second opinion.") || strings.Contains(msg, "alpha:") {
		t.Errorf("prompt-2 agent text = %q; want beta's only", msg)
	}
	if len(p2.Late.Kinds) > 0 {
		t.Errorf("prompt-2: updates %v arrived after the prompt's answer; ACP wants them before", p2.Late.Kinds)
	}
	if s, err := d.client.Session(ctx, sess.ID); err != nil || s.ActiveAgent != "beta" {
		t.Errorf("pool session after the switch = %+v, %v; want beta active", s, err)
	}

	type listedSession struct {
		SessionID string `json:"sessionId"`
		Cwd       string `json:"cwd"`
		UpdatedAt string `json:"updatedAt"`
	}
	var listed struct {
		Sessions []listedSession `json:"sessions"`
	}
	tsUnmarshal(t, first.step(t, "session/list"), &listed)
	if !slices.ContainsFunc(listed.Sessions, func(s listedSession) bool {
		return s.SessionID == id && s.Cwd != ""
	}) {
		t.Errorf("session/list {cwd: %s} = %+v; want %s", cwd, listed.Sessions, id)
	}

	if k := first.step(t, "kill"); !k.ConnectionClosed {
		t.Errorf("after SIGKILL of agentpool acp the SDK's connection is open")
	}
	if s, err := d.client.Session(ctx, sess.ID); err != nil || s.Status == "closed" {
		t.Errorf("pool session after agentpool acp was killed = %+v, %v; want it kept open", s, err)
	}

	// A new process reattaches without replay.
	resumed := runTSClient(t, client, home, cwd, map[string]any{"mode": "resume", "command": command, "cwd": cwd, "sessionId": id})
	r := resumed.step(t, "session/resume")
	if txt := r.Updates.Text["agent_message_chunk"]; txt != "" {
		t.Errorf("session/resume sent agent text %q; want no replay", txt)
	}
	if e := resumed.step(t, "exit"); e.Exit == nil || e.Exit.Code == nil || *e.Exit.Code != 0 {
		t.Errorf("agentpool acp after its stdin closed: exit %+v; want 0", e.Exit)
	}

	// Another loads it: the history comes back as updates, then it closes it.
	reload := runTSClient(t, client, home, cwd, map[string]any{"mode": "reload", "command": command, "cwd": cwd, "sessionId": id})
	reload.step(t, "initialize")
	l := reload.step(t, "session/load")
	replayed := l.Updates.Text["agent_message_chunk"]
	for _, want := range []string{"alpha: looking.", "alpha: wrote notes.txt.", "beta: second opinion."} {
		if !strings.Contains(replayed, want) {
			t.Errorf("session/load replayed agent text %q (after the answer: %q); want %q in it, before the answer",
				replayed, l.Late.Text["agent_message_chunk"], want)
		}
	}
	if user := l.Updates.Text["user_message_chunk"]; !strings.Contains(user, prompts[0]) || !strings.Contains(user, prompts[1]) {
		t.Errorf("session/load replayed user text %q; want both prompts", user)
	}
	if i, j := strings.Index(replayed, "alpha: wrote"), strings.Index(replayed, "beta:"); i > j {
		t.Errorf("session/load replayed %q; want alpha's turn before beta's", replayed)
	}
	reload.step(t, "session/close")
	if e := reload.step(t, "exit"); e.Exit == nil || e.Exit.Code == nil || *e.Exit.Code != 0 {
		t.Errorf("agentpool acp after its stdin closed: exit %+v; want 0", e.Exit)
	}
	if len(reload.steps["exit"].FSCalls)+len(resumed.steps["exit"].FSCalls) > 0 {
		t.Errorf("agentpool acp called the client's fs methods %v, which the client did not offer", reload.steps["exit"].FSCalls)
	}
	s, err := d.client.Session(ctx, sess.ID)
	if err != nil || s.Status != "closed" {
		t.Errorf("pool session after session/close = %+v, %v; want closed", s, err)
	}
	if !branchExists(repo, sess.Worktree.Branch) {
		t.Errorf("branch %s is gone after session/close; want it kept", sess.Worktree.Branch)
	} else if out := e2eGit(t, repo, "show", sess.Worktree.Branch+":notes.txt"); !strings.Contains(out, prompts[0]) {
		t.Errorf("notes.txt on %s = %q; want the session's work", sess.Worktree.Branch, out)
	}

	// What an editor may get wrong is refused with an error a person can
	// act on, and leaves nothing half-created.
	before, err := d.client.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	bad := runTSClient(t, client, home, cwd, map[string]any{"mode": "bad", "command": command, "cwd": cwd, "outside": outside,
		"disabled": "off", "slow": "slow", "started": "slow: started."})
	for _, c := range []struct {
		step  string
		codes []int
		words []string // one of them in the message
	}{
		{"session/new outside a repository", []int{-32602, -32600}, []string{"git", "repositor"}},
		{"session/new relative cwd", []int{-32602}, []string{"absolute"}},
		{"session/load unknown", []int{-32002}, []string{"s-NOSUCHSESSION", "not found", "no session"}},
		{"session/prompt unknown", []int{-32002}, []string{"s-NOSUCHSESSION", "not found", "no session"}},
		{"session/close unknown", []int{-32002}, []string{"s-NOSUCHSESSION", "not found", "no session"}},
		{"set_config_option unknown agent", []int{-32602, -32600, -32002}, []string{"no-such-agent"}},
		{"set_config_option unknown option", []int{-32602, -32600, -32002}, []string{"no-such-option"}},
		{"set_config_option unknown option after a turn", []int{-32602, -32600, -32002}, []string{"no-such-option"}},
		{"set_config_option disabled agent", []int{-32602, -32600}, []string{"disabled"}},
		{"session/prompt while one runs", []int{-32600, -32602}, []string{"running", "busy", "already"}},
	} {
		code, msg := bad.refusal(t, c.step)
		if msg == "" {
			continue
		}
		if !slices.Contains(c.codes, code) || !slices.ContainsFunc(c.words, func(w string) bool { return strings.Contains(strings.ToLower(msg), strings.ToLower(w)) }) {
			t.Errorf("%s refused with %d %q; want code in %v and one of %q in the message", c.step, code, msg, c.codes, c.words)
		}
	}
	var tried struct {
		SessionID string `json:"sessionId"`
	}
	tsUnmarshal(t, bad.step(t, "session/new"), &created)
	if o, _ := tsOption(created.ConfigOptions, "agent"); slices.Contains(o.values(), "off") {
		t.Errorf("session/new Agent choices = %v; want the disabled agent left out", o.values())
	}
	tsUnmarshal(t, bad.step(t, "session/new"), &tried)
	bad.step(t, "prompt started")
	if got := tsStopReason(t, bad.step(t, "session/cancel")); got != "cancelled" {
		t.Errorf("the prompt that session/cancel ended answered stopReason %q; want cancelled", got)
	}
	bad.step(t, "session/close")
	bad.step(t, "exit")
	after, err := d.client.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range after {
		if !slices.ContainsFunc(before, func(b pool.Session) bool { return b.ID == s.ID }) && s.ID != tried.SessionID && s.Status != "closed" {
			t.Errorf("after the refused requests, pool session %s (%s, %s) is open; want nothing half-created", s.ID, s.Repo, s.Status)
		}
	}
	if s, err := d.client.Session(ctx, tried.SessionID); err != nil || s.Status != "closed" {
		t.Errorf("session %s after session/close = %+v, %v; want closed", tried.SessionID, s, err)
	}

	// With no daemon, initialize fails saying how to start one, and nothing
	// is created in the editor's folder or the empty data directory.
	none := t.TempDir()
	lone := runTSClientEnv(t, client, []string{"AGENTPOOL_HOME=" + none, "XDG_STATE_HOME=" + t.TempDir()}, cwd,
		map[string]any{"mode": "nodaemon", "command": command})
	if _, msg := lone.refusal(t, "initialize"); msg != "" && !strings.Contains(msg, "agentpool serve") && !strings.Contains(msg, " serve") {
		t.Errorf("initialize with no daemon refused with %q; want how to start it (agentpool serve)", msg)
	}
	if ents, _ := os.ReadDir(none); len(ents) > 0 {
		t.Errorf("agentpool acp with no daemon left %d entries in the empty AGENTPOOL_HOME; want none", len(ents))
	}
	if out := e2eGit(t, repo, "status", "--porcelain", "--ignored"); out != "" {
		t.Errorf("the editor's repository after agentpool acp ran in it:\n%s\nwant it untouched", out)
	}
}

// refusal returns the error of a step that must have been refused, failing
// the test when it was answered or failed other than with a JSON-RPC error.
func (r tsRun) refusal(t *testing.T, name string) (code int, msg string) {
	t.Helper()
	s, ok := r.steps[name]
	if !ok {
		t.Fatalf("TS client: step %s did not run (steps: %v)\n%s", name, r.order, r.stderr)
	}
	if !s.OK {
		t.Errorf("%s answered %s; want an ACP error", name, s.Result)
		return 0, ""
	}
	if s.Error == nil || s.Error.Code == nil || s.Error.Message == "" {
		b, _ := json.Marshal(s.Error)
		t.Errorf("%s failed with %s; want a JSON-RPC error with a message", name, b)
		return 0, ""
	}
	return *s.Error.Code, s.Error.Message
}

// tsPoolSession returns the pool session that ACP session id stands for:
// the pool session of that id, else the only one of repo.
func tsPoolSession(t *testing.T, d *daemon, id, repo string) pool.Session {
	t.Helper()
	ctx := context.Background()
	if s, err := d.client.Session(ctx, id); err == nil {
		return s
	}
	all, err := d.client.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var of []pool.Session
	for _, s := range all {
		if sameDir(s.Repo, repo) {
			of = append(of, s)
		}
	}
	if len(of) != 1 {
		t.Fatalf("ACP session %s: pool sessions of %s = %+v; want one", id, repo, of)
	}
	t.Logf("ACP session id %s is pool session %s", id, of[0].ID)
	return of[0]
}

func tsUnmarshal(t *testing.T, s tsStep, v any) {
	t.Helper()
	if err := json.Unmarshal(s.Result, v); err != nil {
		t.Fatalf("%s result %s: %v", s.Step, s.Result, err)
	}
}

func tsStopReason(t *testing.T, s tsStep) string {
	t.Helper()
	var r struct {
		StopReason string `json:"stopReason"`
	}
	tsUnmarshal(t, s, &r)
	return r.StopReason
}

func tsOption(opts []tsConfigOption, id string) (tsConfigOption, bool) {
	for _, o := range opts {
		if o.ID == id {
			return o, true
		}
	}
	return tsConfigOption{}, false
}

func tsKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
