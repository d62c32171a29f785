package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	acp "github.com/coder/acp-go-sdk"
)

// acpAlpha is the first scripted agent of the ACP tests: it offers a
// model option, two modes and a command; each turn reads, asks to write
// notes.txt and writes the prompt there once allowed.
func acpAlpha() agenttest.Script {
	return agenttest.Script{
		AgentName: "alpha",
		Modes:     []agenttest.Mode{{ID: "default", Name: "Default"}, {ID: "plan", Name: "Plan"}},
		ConfigOptions: json.RawMessage(`[{"id":"model","name":"Model","category":"model","type":"select","currentValue":"fast",
			"options":[{"value":"fast","name":"Fast"},{"value":"smart","name":"Smart"}]}]`),
		Commands: []agenttest.Command{{Name: "help", Description: "Show help"}},
		Turns: []agenttest.Turn{{Steps: []agenttest.Step{
			{Thought: "thinking"},
			{Chunk: "alpha looks. "},
			{ToolCall: &agenttest.ToolCall{ID: "read-1", Title: "Read README.md", Kind: "read", Status: "completed", Locations: []string{"README.md"}}},
			{Permission: &agenttest.Permission{
				ToolCall: agenttest.ToolCall{ID: "edit-1", Title: "Write notes.txt", Kind: "edit", Locations: []string{"notes.txt"}},
				Allowed:  []agenttest.Step{{Write: &agenttest.FileOp{Path: "notes.txt", Content: "{{prompt}}\n"}}, {Chunk: "alpha wrote notes.txt."}},
				Rejected: []agenttest.Step{{Chunk: "alpha refused."}},
			}},
		}}},
	}
}

// acpBeta is the second: its first turn answers at once, its next ones
// answer and then wait for a cancel.
func acpBeta() agenttest.Script {
	return agenttest.Script{AgentName: "beta", Turns: []agenttest.Turn{
		{Steps: []agenttest.Step{{Chunk: "beta says {{prompt}}"}}},
		{Steps: []agenttest.Step{{Chunk: "beta works on {{prompt}}"}, {WaitCancel: true}}},
	}}
}

// writeACPProviders writes home's providers.json: alpha, beta, and gamma
// (disabled).
func writeACPProviders(t testing.TB, home, bin string) {
	t.Helper()
	provs := map[string]any{}
	for id, script := range map[string]agenttest.Script{"alpha": acpAlpha(), "beta": acpBeta(), "gamma": acpBeta()} {
		js, err := json.Marshal(script)
		if err != nil {
			t.Fatal(err)
		}
		p := map[string]any{"extends": "acp", "label": id, "command": []string{bin, "demo-agent"},
			"env": map[string]string{"AGENTPOOL_DEMO_SCRIPT": string(js)}}
		if id == "gamma" {
			p["enabled"] = false
		}
		provs[id] = p
	}
	b, err := json.Marshal(map[string]any{"version": 1, "providers": provs})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, providersFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// acpEditor is an editor: acp-go-sdk's client side driving `agentpool acp`.
type acpEditor struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	conn   *acp.ClientSideConnection
	stderr *bytes.Buffer

	mu      sync.Mutex
	updates []acp.SessionNotification
	// answer decides permission requests: an option kind, or "" to wait
	// until the request is withdrawn (counted in withdrawn).
	answer    string
	asked     int
	withdrawn int
	// chunks, when set, gets the session of each agent message chunk
	// (without blocking).
	chunks chan acp.SessionId
}

// startEditor starts `agentpool acp` in dir against the daemon of home.
func startEditor(t testing.TB, bin, home, dir string, args ...string) *acpEditor {
	t.Helper()
	return startACPPeer(t, bin, []string{"AGENTPOOL_HOME=" + home}, dir, append([]string{"acp", "--log-level", "debug"}, args...)...)
}

// startACPPeer starts bin with args in dir, env added to its
// environment, as an ACP agent that an acpEditor drives.
func startACPPeer(t testing.TB, bin string, env []string, dir string, args ...string) *acpEditor {
	t.Helper()
	return startACPPeerEnv(t, bin, append(os.Environ(), env...), dir, args...)
}

// startACPPeerEnv is startACPPeer with env the whole environment.
func startACPPeerEnv(t testing.TB, bin string, env []string, dir string, args ...string) *acpEditor {
	t.Helper()
	e := &acpEditor{t: t, stderr: &bytes.Buffer{}, answer: "allow_once"}
	e.cmd = exec.Command(bin, args...)
	e.cmd.Env = env
	e.cmd.Dir = dir
	e.cmd.Stderr = e.stderr
	in, err := e.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.stdin = in
	// The SDK logs at info when the peer goes away: on stderr and only
	// warnings, so that a benchmark's stdout stays its figures. Its reader
	// starts with the connection and reads the logger unguarded: it waits
	// until the logger is set.
	gate := &gatedReader{r: out, open: make(chan struct{})}
	e.conn = acp.NewClientSideConnection(e, in, gate)
	e.conn.SetLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	close(gate.open)
	t.Cleanup(func() {
		e.stop()
		if t.Failed() {
			t.Logf("agentpool acp stderr:\n%s", e.stderr)
		}
	})
	return e
}

// stop closes the editor's end and waits for `agentpool acp` to exit.
func (e *acpEditor) stop() {
	if e.cmd.ProcessState != nil {
		return
	}
	_ = e.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- e.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		e.t.Errorf("agentpool acp did not exit within 10 s of its stdin closing")
		_ = e.cmd.Process.Kill()
		<-done
	}
}

// kill9 kills `agentpool acp` with SIGKILL.
func (e *acpEditor) kill9() {
	_ = e.cmd.Process.Signal(syscall.SIGKILL)
	_ = e.cmd.Wait()
}

func (e *acpEditor) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *acpEditor) initialize() acp.InitializeResponse {
	e.t.Helper()
	res, err := e.conn.Initialize(e.ctx(), acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber,
		ClientInfo: &acp.Implementation{Name: "acp-e2e", Version: "1"}})
	if err != nil {
		e.t.Fatalf("initialize: %v", err)
	}
	return res
}

// since returns the updates of session id from the n-th on.
func (e *acpEditor) since(id acp.SessionId, n int) []acp.SessionUpdate {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []acp.SessionUpdate
	for _, u := range e.updates[min(n, len(e.updates)):] {
		if u.SessionId == id {
			out = append(out, u.Update)
		}
	}
	return out
}

func (e *acpEditor) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.updates)
}

// waitUpdate waits until an update of id from the n-th on matches.
func (e *acpEditor) waitUpdate(id acp.SessionId, n int, what string, match func(acp.SessionUpdate) bool) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if slices.ContainsFunc(e.since(id, n), match) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("no %s; updates: %s", what, describeUpdates(e.since(id, n)))
}

// agentText is the agent text and thoughts among updates.
func agentText(us []acp.SessionUpdate) string {
	var b strings.Builder
	for _, u := range us {
		switch {
		case u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil:
			b.WriteString(u.AgentMessageChunk.Content.Text.Text)
		case u.AgentThoughtChunk != nil && u.AgentThoughtChunk.Content.Text != nil:
			b.WriteString("(" + u.AgentThoughtChunk.Content.Text.Text + ")")
		case u.UserMessageChunk != nil && u.UserMessageChunk.Content.Text != nil:
			b.WriteString("[user: " + u.UserMessageChunk.Content.Text.Text + "]")
		}
	}
	return b.String()
}

func describeUpdates(us []acp.SessionUpdate) string {
	b, _ := json.Marshal(us)
	return string(b)
}

// The acp.Client side.

func (e *acpEditor) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	e.mu.Lock()
	e.updates = append(e.updates, n)
	ch := e.chunks
	e.mu.Unlock()
	if ch != nil && n.Update.AgentMessageChunk != nil {
		select {
		case ch <- n.SessionId:
		default:
		}
	}
	return nil
}

func (e *acpEditor) RequestPermission(ctx context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	e.mu.Lock()
	e.asked++
	kind := e.answer
	e.mu.Unlock()
	if kind == "" {
		<-ctx.Done()
		e.mu.Lock()
		e.withdrawn++
		e.mu.Unlock()
		return acp.RequestPermissionResponse{}, ctx.Err()
	}
	for _, o := range p.Options {
		if string(o.Kind) == kind {
			return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Selected: &acp.RequestPermissionOutcomeSelected{OptionId: o.OptionId}}}, nil
		}
	}
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
}

func (e *acpEditor) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, errors.New("not offered")
}

func (e *acpEditor) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, errors.New("not offered")
}

func (e *acpEditor) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, errors.New("not offered")
}

func (e *acpEditor) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, errors.New("not offered")
}

func (e *acpEditor) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, errors.New("not offered")
}

func (e *acpEditor) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, errors.New("not offered")
}

func (e *acpEditor) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, errors.New("not offered")
}

// optionOf returns the config option id among opts.
func optionOf(opts []acp.SessionConfigOption, id string) *acp.SessionConfigOptionSelect {
	for _, o := range opts {
		if o.Select != nil && string(o.Select.Id) == id {
			return o.Select
		}
	}
	return nil
}

// choices lists a select option's values.
func choices(o *acp.SessionConfigOptionSelect) []string {
	var out []string
	if o.Options.Ungrouped != nil {
		for _, c := range *o.Options.Ungrouped {
			out = append(out, string(c.Value))
		}
	}
	return out
}

// acpMessage is the message of an ACP error.
func acpMessage(err error) string {
	var re *acp.RequestError
	if errors.As(err, &re) {
		return re.Message
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// sameDir reports whether a and b name the same directory.
func sameDir(a, b string) bool {
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return filepath.Clean(a) == filepath.Clean(b) || (err1 == nil && err2 == nil && ra == rb)
}

// gatedReader holds every Read until open is closed.
type gatedReader struct {
	r    io.Reader
	open chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}
