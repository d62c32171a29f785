package acp_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// wantLinks checks the SDK connections the backend has made, and waits a
// little for a retired one to be seen closed (a link retires on the
// goroutine that answered the last request).
func wantLinks(t *testing.T, b *acp.Backend, made int, open bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, o := acp.LinkState(b)
		if m == made && o == open {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("SDK connections made = %d, open = %v; want %d, %v", m, o, made, open)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A warm agent between turns holds no SDK connection, and turns that only
// stream never make one.
func TestWarmBackendHoldsNoSDKConnection(t *testing.T) {
	w := &wireLog{}
	h := newBackend(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "x"}, {Thought: "y"}}}}}, acp.Config{Wire: w.record})
	h.start(t, "")
	wantLinks(t, h.b, 1, false) // the handshake's, retired
	before := runtime.NumGoroutine()
	for i := range 20 {
		if res, err := h.prompt(t, "hi"); err != nil || res.StopReason != backends.StopEndTurn {
			t.Fatalf("Prompt %d = %+v, %v; want end_turn", i, res, err)
		}
	}
	wantLinks(t, h.b, 1, false)
	if n := len(h.turn.all()); n != 40 {
		t.Errorf("%d events in 20 turns; want 40", n)
	}
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Errorf("goroutines %d after 20 turns; %d before", after, before)
	}
	// The prompts carry distinct ids out of the SDK's range.
	prompts := w.byID(t, false, "session/prompt")
	if len(prompts) != 20 {
		t.Errorf("%d distinct session/prompt ids; want 20", len(prompts))
	}
	for id := range prompts {
		if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 1<<32 {
			t.Errorf("session/prompt id %s; want an integer above 1<<32", id)
		}
	}
}

// Requests of the agent during a turn share one SDK connection, kept until
// the turn ends; a request outside a turn makes one that retires once
// answered.
func TestAgentRequestsWakeTheSDKConnection(t *testing.T) {
	dir := t.TempDir()
	var asked atomic.Int32
	perm := func(_ context.Context, req acp.PermissionRequest) (acp.PermissionOutcome, error) {
		asked.Add(1)
		return acp.PermissionOutcome{OptionID: "allow"}, nil
	}
	s := agenttest.Script{Turns: []agenttest.Turn{
		{
			Steps: []agenttest.Step{
				{Write: &agenttest.FileOp{Path: "a.txt", Content: "one"}},
				{Permission: &agenttest.Permission{ToolCall: agenttest.ToolCall{ID: "t1", Title: "Edit", Kind: "edit"}}},
				{Write: &agenttest.FileOp{Path: "b.txt", Content: "two"}},
				{Chunk: "done"},
			},
			After: []agenttest.Step{{SleepMs: 20}, {Write: &agenttest.FileOp{Path: "late.txt", Content: "late"}}},
		},
		{Steps: []agenttest.Step{{Chunk: "plain"}}},
	}}
	h := newBackend(t, s, acp.Config{Spec: backends.Spec{Dir: dir}, FS: newFS(t, dir), Permissions: perm})
	h.start(t, "")
	wantLinks(t, h.b, 1, false)
	if res, err := h.prompt(t, "work"); err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt = %+v, %v; want end_turn", res, err)
	}
	if asked.Load() != 1 {
		t.Errorf("permission asked %d times; want 1", asked.Load())
	}
	for name, want := range map[string]string{"a.txt": "one", "b.txt": "two"} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	// One connection for the turn's three requests, plus one for the
	// write the agent sends after its answer; both retired.
	waitFile(t, filepath.Join(dir, "late.txt"), "late")
	wantLinks(t, h.b, 3, false)
	if res, err := h.prompt(t, "again"); err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("second Prompt = %+v, %v", res, err)
	}
	wantLinks(t, h.b, 3, false)
}

// SetMode makes a connection for its call; a request the agent never
// answers keeps it open (a new one would reuse the SDK's ids), and turns
// still work meanwhile.
func TestSDKCallsAndUnansweredRequests(t *testing.T) {
	h := newBackend(t, agenttest.Script{
		Modes:      []agenttest.Mode{{ID: "ask", Name: "Ask"}, {ID: "code", Name: "Code"}},
		Unanswered: []string{"session/set_config_option"},
	}, acp.Config{})
	h.start(t, "")
	if err := h.b.SetMode(context.Background(), "code"); err != nil {
		t.Fatalf("SetMode: %v", err)
	}
	wantLinks(t, h.b, 2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := h.b.SetConfigOption(ctx, "model", "fast"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SetConfigOption on an agent that never answers = %v; want DeadlineExceeded", err)
	}
	wantLinks(t, h.b, 3, true)
	if res, err := h.prompt(t, "hi"); err != nil || res.StopReason != backends.StopEndTurn {
		t.Fatalf("Prompt = %+v, %v; want end_turn", res, err)
	}
	if err := h.b.SetMode(context.Background(), "ask"); err != nil {
		t.Fatalf("SetMode again: %v", err)
	}
	wantLinks(t, h.b, 3, true)
}

func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := os.ReadFile(path)
		if err == nil && string(got) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %q, %v; want %q", path, got, err, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
