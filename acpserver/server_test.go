package acpserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/registry"
	acp "github.com/coder/acp-go-sdk"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPromptText(t *testing.T) {
	link := acp.ResourceLinkBlock("main.go", "file:///repo/main.go")
	res := acp.ResourceBlock(acp.EmbeddedResourceResource{TextResourceContents: &acp.TextResourceContents{Uri: "file:///repo/a.txt", Text: "hello\n"}})
	for _, tc := range []struct {
		name   string
		blocks []acp.ContentBlock
		want   string
		err    string
	}{
		{"text", []acp.ContentBlock{acp.TextBlock("fix it")}, "fix it", ""},
		{"link", []acp.ContentBlock{acp.TextBlock("look at"), link}, "look at file:///repo/main.go", ""},
		{"resource", []acp.ContentBlock{acp.TextBlock("see"), res}, "see\n\nfile:///repo/a.txt:\n```\nhello\n```", ""},
		{"image", []acp.ContentBlock{acp.ImageBlock("AAAA", "image/png")}, "", "images"},
		{"empty", []acp.ContentBlock{acp.TextBlock("  ")}, "", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := promptText(tc.blocks)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("promptText() error = %v; want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("promptText() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestSlashCommand(t *testing.T) {
	for in, want := range map[string][2]string{"/diff --stat": {"diff", "--stat"}, "/merge": {"merge", ""}} {
		name, args, ok := slashCommand(in)
		if !ok || name != want[0] || args != want[1] {
			t.Errorf("slashCommand(%q) = %q, %q, %v; want %q, %q", in, name, args, ok, want[0], want[1])
		}
	}
	if _, _, ok := slashCommand("no slash"); ok {
		t.Errorf("slashCommand(no slash) ok")
	}
}

func TestRawUpdate(t *testing.T) {
	u, ok := rawUpdate(json.RawMessage(`{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Edit","kind":"edit","locations":[{"path":"/w/a.go"}],
		"content":[{"type":"diff","path":"/w/a.go","oldText":"a","newText":"b"}]}`))
	if !ok || u.ToolCall == nil || u.ToolCall.ToolCallId != "t1" || len(u.ToolCall.Content) != 1 || u.ToolCall.Content[0].Diff == nil {
		t.Fatalf("rawUpdate(tool_call) = %+v, %v; want the call with its diff", u, ok)
	}
	if _, ok := rawUpdate(json.RawMessage(`{"sessionUpdate":"future_kind","toolCallId":"t1"}`)); ok {
		t.Errorf("rawUpdate(unknown kind) ok; want it dropped")
	}
}

func TestPassOptionKeepsIDsAndGroups(t *testing.T) {
	o := passOption(backends.ConfigOption{ID: "agent", Name: "Sub-agent", Type: backends.OptionSelect, Current: "x",
		Choices: []backends.Choice{{Value: "x", Name: "X", Group: "g1"}, {Value: "y", Name: "Y", Group: "g2"}}})
	if o.Select == nil || o.Select.Id != "agent.agent" || o.Select.Options.Grouped == nil || len(*o.Select.Options.Grouped) != 2 {
		t.Fatalf("passOption = %+v; want agent.agent in two groups", o.Select)
	}
	if underlyingID("agent.agent") != "agent" || underlyingID("model") != "model" {
		t.Errorf("underlyingID does not undo optionID")
	}
	b := passOption(backends.ConfigOption{ID: "fast", Name: "Fast", Type: backends.OptionBoolean, Current: "true"})
	if b.Boolean == nil || !b.Boolean.CurrentValue {
		t.Errorf("passOption(boolean) = %+v", b)
	}
}

// TestServeWithoutDaemon: initialize says why it cannot work, and Serve
// ends, leaving no goroutine, when the editor closes its end.
func TestServeWithoutDaemon(t *testing.T) {
	s, err := New(Config{Connect: func(context.Context) (API, error) {
		return nil, errors.New("no daemon found in /home/u/.agentpool: start one with: agentpool serve")
	}})
	if err != nil {
		t.Fatal(err)
	}
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), toAgentR, fromAgentW) }()
	client := acp.NewClientSideConnection(nopClient{}, toAgentW, fromAgentR)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = client.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber})
	if err == nil || !strings.Contains(err.Error(), "agentpool serve") {
		t.Errorf("initialize = %v; want how to start the daemon", err)
	}
	_ = toAgentW.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not end when the editor closed its end")
	}
	_ = fromAgentR.Close()
	_ = fromAgentW.Close()
	<-client.Done()
}

// nopClient is an editor that offers nothing.
type nopClient struct{}

func (nopClient) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, errors.New("no")
}
func (nopClient) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, errors.New("no")
}
func (nopClient) RequestPermission(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	return acp.RequestPermissionResponse{}, errors.New("no")
}
func (nopClient) SessionUpdate(context.Context, acp.SessionNotification) error { return nil }
func (nopClient) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, errors.New("no")
}
func (nopClient) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, errors.New("no")
}
func (nopClient) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, errors.New("no")
}
func (nopClient) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, errors.New("no")
}
func (nopClient) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, errors.New("no")
}

func TestTitleOf(t *testing.T) {
	long := strings.Repeat("word ", 30)
	for _, tc := range []struct{ in, want string }{
		{"fix the bug", "fix the bug"},
		{"\n\n  first line  \nsecond", "first line"},
		{"", ""},
		{long, strings.TrimSpace(long[:titleRunes-1]) + "…"},
	} {
		if got := titleOf(tc.in); got != tc.want {
			t.Errorf("titleOf(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestAgentChoices: the Agent option offers the enabled, ready (or being
// probed) ACP providers, and the current agent whatever its state; a
// terminal, disabled, missing or unknown agent is refused with a reason.
func TestAgentChoices(t *testing.T) {
	snap := registry.Snapshot{Providers: []registry.ProviderStatus{
		// Sorted by id, as the registry gives them.
		{ID: "aider", Kind: backends.KindPTY, Enabled: true, Status: registry.StatusReady},
		{ID: "claude", Label: "Claude", Kind: backends.KindACP, Enabled: true, Status: registry.StatusReady},
		{ID: "codex", Kind: backends.KindACP, Enabled: true, Status: registry.StatusProbing},
		{ID: "gone", Kind: backends.KindACP, Enabled: true, Status: registry.StatusNotInstalled},
		{ID: "off", Kind: backends.KindACP, Enabled: false, Status: registry.StatusDisabled},
	}}
	var got []string
	for _, c := range agentChoices(snap, "claude") {
		got = append(got, string(c.Value)+"="+c.Name)
	}
	if want := "claude=Claude codex=codex"; strings.Join(got, " ") != want {
		t.Errorf("choices = %v; want %s", got, want)
	}
	got = nil
	for _, c := range agentChoices(snap, "off") {
		got = append(got, string(c.Value))
	}
	if want := "claude codex off"; strings.Join(got, " ") != want {
		t.Errorf("choices with a disabled current agent = %v; want %s (the current one kept)", got, want)
	}
	for agent, want := range map[string]string{"aider": "terminal program", "off": "providers enable off",
		"gone": "not ready", "nope": "no agent \"nope\"", "claude": "", "codex": ""} {
		err := checkAgent(snap, agent)
		var msg string
		var re *acp.RequestError
		if errors.As(err, &re) {
			msg = re.Message
		} else if err != nil {
			msg = err.Error()
		}
		if want == "" && err != nil || want != "" && !strings.Contains(msg, want) {
			t.Errorf("checkAgent(%s) = %v; want %q in it", agent, err, want)
		}
	}
}

// A folder that is no repository is said to be none; one whose lookup was
// cut short (the editor went away) is not.
func TestGitTopLevelSaysWhy(t *testing.T) {
	dir := t.TempDir()
	if _, err := gitTopLevel(context.Background(), dir); err == nil || !strings.Contains(err.Error(), "not inside a git repository") {
		t.Errorf("gitTopLevel of a plain folder = %v; want it said to be no repository", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := gitTopLevel(ctx, dir)
	if err == nil || strings.Contains(err.Error(), "not inside a git repository") || !errors.Is(err, context.Canceled) {
		t.Errorf("gitTopLevel with its context cancelled = %v; want the cancellation, not a missing repository", err)
	}
}

// The top of an editor's folder is asked of git once, and again when it
// may have changed: its .git gone, or a repository made between.
func TestRepoOfAsksGitOnce(t *testing.T) {
	top := t.TempDir()
	cwd := filepath.Join(top, "src", "pkg")
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(top, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	asked := 0
	s, err := New(Config{
		Connect: func(context.Context) (API, error) { return nil, errors.New("no daemon here") },
		GitTopLevel: func(_ context.Context, dir string) (string, error) {
			asked++
			for d := dir; ; d = filepath.Dir(d) {
				if _, err := os.Stat(filepath.Join(d, ".git")); err == nil {
					return d, nil
				}
				if d == filepath.Dir(d) {
					return "", errors.New("not a repository")
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(want string, wantAsked int) {
		t.Helper()
		got, err := s.repoOf(t.Context(), cwd)
		if err != nil || got != want || asked != wantAsked {
			t.Fatalf("repoOf(%s) = %q, %v after %d git calls; want %q after %d", cwd, got, err, asked, want, wantAsked)
		}
	}
	ask(top, 1)
	ask(top, 1)
	nested := filepath.Join(top, "src")
	if err := os.Mkdir(filepath.Join(nested, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	ask(nested, 2)
	ask(nested, 2)
	if err := os.Remove(filepath.Join(nested, ".git")); err != nil {
		t.Fatal(err)
	}
	ask(top, 3)
}
