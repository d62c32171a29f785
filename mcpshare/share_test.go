package mcpshare_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentpool/agentpool/mcpshare"
	"github.com/agentpool/agentpool/mcpshare/mcpsharetest"
)

// Three sessions' agents calling at once reach one process.
func TestOneProcessForManySessions(t *testing.T) {
	m := newManager(t, 0)
	dir := t.TempDir()
	def := mcpsharetest.Definition(dir, "one", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		pids = map[string]bool{}
	)
	for _, session := range []string{"s-a", "s-b", "s-c"} {
		cs := mustConnect(t, attach(t, m, session, def), nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				got, err := call(ctx, cs, "echo", map[string]any{"text": session})
				if err != nil || !strings.HasSuffix(got, ": "+session) {
					t.Errorf("%s call %d = %q, %v; want its own text back", session, i, got, err)
					return
				}
				pid, _, _ := strings.Cut(got, ":")
				mu.Lock()
				pids[pid] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := mcpsharetest.Instances(dir); n != 1 {
		t.Errorf("server instances = %d; want 1", n)
	}
	if len(pids) != 1 {
		t.Errorf("answers came from %v; want one process", pids)
	}
	st := stat(t, m)
	if st.Clients != 3 || st.Calls != 15 || st.Errors != 0 || !st.Running || st.RSS <= 0 {
		t.Errorf("Stat = %+v; want 3 clients, 15 calls, no error, running with an RSS", st)
	}
}

// A credential reaches only its own MCP sessions and servers; a revoked
// one reaches nothing.
func TestCredentialOfAnotherSessionRefused(t *testing.T) {
	m := newManager(t, 0)
	dir := t.TempDir()
	a := attach(t, m, "s-a", mcpsharetest.Definition(dir, "x", 0))
	b := attach(t, m, "s-b", mcpsharetest.Definition(dir, "x", 0))
	other := attach(t, m, "s-c", mcpsharetest.Definition(dir, "other", 0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	csB := mustConnect(t, b, nil)
	if _, err := call(ctx, csB, "echo", map[string]any{"text": "b"}); err != nil {
		t.Fatalf("b's call: %v", err)
	}
	// a's credential on b's MCP session.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URL("fake"),
		strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"text":"stolen"}}}`))
	req.Header.Set("Authorization", "Bearer "+a.Token())
	req.Header.Set("Mcp-Session-Id", csB.ID())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode < 400 || strings.Contains(string(body), "stolen") {
		t.Errorf("a's credential on b's session: %d %s; want refused", resp.StatusCode, body)
	}
	// a's credential on a server a was not given.
	if _, err := connect(t, other.URL("fake"), a.Token(), nil); err == nil {
		t.Errorf("a's credential reached a server it was not given")
	}
	// No credential, a made-up one.
	for _, tok := range []string{"", "0123456789abcdef", b.Token() + "x"} {
		if _, err := connect(t, b.URL("fake"), tok, nil); err == nil {
			t.Errorf("credential %q was accepted", tok)
		}
	}
	// b released (its agent evicted): its session ends, its credential
	// is refused, and the server counts one client fewer.
	b.Release()
	if _, err := call(ctx, csB, "echo", map[string]any{"text": "after"}); err == nil {
		t.Errorf("a call on a released lease's session worked")
	}
	if _, err := connect(t, b.URL("fake"), b.Token(), nil); err == nil {
		t.Errorf("a released credential was accepted")
	}
	for _, st := range m.Stats() {
		if st.Names[0] == "fake" && st.Command[0] != "" && st.Clients > 1 {
			t.Errorf("Stat %s clients = %d after release; want at most 1", st.ID, st.Clients)
		}
	}
}

// A crash of the server fails only the calls in flight; the next call
// starts it again.
func TestCrashMidCall(t *testing.T) {
	m := newManager(t, 0)
	dir := t.TempDir()
	def := mcpsharetest.Definition(dir, "c", 0)
	csA := mustConnect(t, attach(t, m, "s-a", def), nil)
	csB := mustConnect(t, attach(t, m, "s-b", def), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := call(ctx, csA, "echo", map[string]any{"text": "before"})
	if err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() {
		_, err := call(ctx, csA, "slow", map[string]any{"ms": 20000})
		slow <- err
	}()
	waitFor(t, "the slow call in flight", func() bool { return stat(t, m).Calls >= 1 && inflightSoon() })
	if _, err := call(ctx, csB, "crash", nil); err == nil {
		t.Errorf("the crashing call succeeded")
	}
	select {
	case err := <-slow:
		if err == nil {
			t.Errorf("the call in flight during the crash succeeded")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call in flight during the crash did not end")
	}
	for _, cs := range []*mcp.ClientSession{csA, csB} {
		got, err := call(ctx, cs, "echo", map[string]any{"text": "after"})
		if err != nil || got == first || !strings.HasSuffix(got, ": after") {
			t.Errorf("call after the crash = %q, %v; want an answer from a new process (before: %q)", got, err, first)
		}
	}
	if n := mcpsharetest.Instances(dir); n != 2 {
		t.Errorf("instances = %d; want 2 (one restart)", n)
	}
	if st := stat(t, m); st.Starts != 2 || st.Errors < 2 {
		t.Errorf("Stat = %+v; want 2 starts and the 2 failed calls counted", st)
	}
}

// inflightSoon gives the slow call a moment to reach the server.
func inflightSoon() bool { time.Sleep(100 * time.Millisecond); return true }

// A server nobody calls stops after the idle time and starts again on
// the next call.
func TestIdleStop(t *testing.T) {
	m := newManager(t, 300*time.Millisecond)
	dir := t.TempDir()
	cs := mustConnect(t, attach(t, m, "s-a", mcpsharetest.Definition(dir, "i", 0)), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := call(ctx, cs, "echo", map[string]any{"text": "1"}); err != nil {
		t.Fatal(err)
	}
	pid := stat(t, m).PID
	waitFor(t, "the idle stop", func() bool { return !stat(t, m).Running && syscall.Kill(pid, 0) != nil })
	if got, err := call(ctx, cs, "echo", map[string]any{"text": "2"}); err != nil || !strings.HasSuffix(got, ": 2") {
		t.Fatalf("call after the idle stop = %q, %v", got, err)
	}
	if n := mcpsharetest.Instances(dir); n != 2 {
		t.Errorf("instances = %d; want 2", n)
	}
}

// Progress goes to the agent that asked, with its own token; a
// cancellation reaches the server; sampling goes to the caller during
// its call; roots/list is empty; a list change reaches every agent.
func TestRouting(t *testing.T) {
	m := newManager(t, 0)
	dir := t.TempDir()
	def := mcpsharetest.Definition(dir, "r", 0)
	var (
		mu       sync.Mutex
		progress = map[string][]any{}
		changed  = map[string]int{}
	)
	opts := func(who string) *mcp.ClientOptions {
		return &mcp.ClientOptions{
			ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				progress[who] = append(progress[who], r.Params.ProgressToken)
				mu.Unlock()
			},
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
				mu.Lock()
				changed[who]++
				mu.Unlock()
			},
			CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "from " + who}}, nil
			},
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": who}}, nil
			},
		}
	}
	csA := mustConnect(t, attach(t, m, "s-a", def), opts("a"))
	csB := mustConnect(t, attach(t, m, "s-b", def), opts("b"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	p := &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 100}}
	p.SetProgressToken("a-token")
	if _, err := csA.CallTool(ctx, p); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(progress["a"]) == 0 || len(progress["b"]) != 0 {
		t.Errorf("progress: a got %d, b got %d; want some for a, none for b", len(progress["a"]), len(progress["b"]))
	}
	for _, tok := range progress["a"] {
		if tok != "a-token" {
			t.Errorf("a got progress token %v; want its own a-token", tok)
		}
	}
	mu.Unlock()

	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := call(cctx, csB, "slow", map[string]any{"ms": 20000})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	ccancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v; want context.Canceled", err)
	}
	waitFor(t, "the server to see the cancellation", func() bool {
		m, _ := filepath.Glob(dir + "/cancelled-*")
		return len(m) == 1
	})

	if got, err := call(ctx, csB, "ask", nil); err != nil || got != "answered: from b" {
		t.Errorf("sampling during b's call = %q, %v; want b's answer", got, err)
	}
	// With a's call in flight too, the server's request has no one caller.
	slowDone := make(chan error, 1)
	go func() {
		_, err := call(ctx, csA, "slow", map[string]any{"ms": 1500})
		slowDone <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if got, err := call(ctx, csB, "ask", nil); err != nil || !strings.HasPrefix(got, "refused: ") || !strings.Contains(got, "no single agent's call") {
		t.Errorf("sampling with two agents' calls in flight = %q, %v; want it refused", got, err)
	}
	if err := <-slowDone; err != nil {
		t.Errorf("a's slow call: %v", err)
	}
	if got, err := call(ctx, csA, "elicit", nil); err != nil || got != "accept: a" {
		t.Errorf("elicitation during a's call = %q, %v; want a's answer", got, err)
	}
	rr, err := csB.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fake://r/about"})
	if err != nil || len(rr.Contents) != 1 || !strings.HasPrefix(rr.Contents[0].Text, "r pid=") {
		t.Errorf("resource through the share = %+v, %v", rr, err)
	}
	gp, err := csA.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"who": "a"}})
	if err != nil || len(gp.Messages) != 1 || gp.Messages[0].Content.(*mcp.TextContent).Text != "hello a" {
		t.Errorf("prompt through the share = %+v, %v", gp, err)
	}
	if got, err := call(ctx, csA, "roots", nil); err != nil || got != "roots: 0" {
		t.Errorf("roots = %q, %v; want none", got, err)
	}
	if _, err := call(ctx, csB, "grow", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "list_changed at both agents", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return changed["a"] > 0 && changed["b"] > 0
	})
	if got, err := call(ctx, csA, "extra", nil); err != nil || got != "extra" {
		t.Errorf("the added tool through a = %q, %v", got, err)
	}
}

// The relay carries a stdio client's session to the shared server.
func TestRelay(t *testing.T) {
	m := newManager(t, 0)
	dir := t.TempDir()
	l := attach(t, m, "s-a", mcpsharetest.Definition(dir, "relayed", 0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	relayed := make(chan error, 1)
	go func() { relayed <- mcpshare.Relay(ctx, l.URL("fake"), l.Token(), inR, outW); _ = outW.Close() }()
	c := mcp.NewClient(&mcp.Implementation{Name: "stdio-agent", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("connect through the relay: %v", err)
	}
	got, err := call(ctx, cs, "echo", map[string]any{"text": "hello"})
	if err != nil || !strings.HasSuffix(got, ": hello") {
		t.Errorf("call through the relay = %q, %v", got, err)
	}
	_ = cs.Close()
	if err := <-relayed; err != nil {
		t.Errorf("Relay ended with %v; want nil when its stdin ends", err)
	}
}
