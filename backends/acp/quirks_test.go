package acp_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

func permissionTurn(opts []agenttest.Option) agenttest.Turn {
	return agenttest.Turn{Steps: []agenttest.Step{{Permission: &agenttest.Permission{
		ToolCall: agenttest.ToolCall{ID: "t1", Title: "Run rm", Kind: "execute"},
		Options:  opts,
		Allowed:  []agenttest.Step{{Chunk: "did it"}},
		Rejected: []agenttest.Step{{Chunk: "skipped"}},
	}}}}
}

// Without a permission handler every request is rejected, choosing the
// reject option by its kind whatever its id, with integer ids from 0 and
// with string ids.
func TestPermissionRejectedWithoutHandler(t *testing.T) {
	odd := []agenttest.Option{{ID: "approved", Name: "Yes", Kind: "allow_once"}, {ID: "abort", Name: "No", Kind: "reject_once"}}
	for _, tc := range []struct {
		name   string
		script agenttest.Script
	}{
		{"int ids from 0", agenttest.Script{IDStart: 0, Turns: []agenttest.Turn{permissionTurn(nil)}}},
		{"string ids", agenttest.Script{StringIDs: true, Turns: []agenttest.Turn{permissionTurn(nil)}}},
		{"agent-specific option ids", agenttest.Script{Turns: []agenttest.Turn{permissionTurn(odd)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newBackend(t, tc.script, acp.Config{})
			h.start(t, "")
			if _, err := h.prompt(t, "x"); err != nil {
				t.Fatal(err)
			}
			tx := h.turn.texts(backends.RoleAgent)
			if !contains(tx, "permission: reject_once") || !contains(tx, "skipped") || contains(tx, "did it") {
				t.Fatalf("agent texts = %q; want a reject", tx)
			}
			ev := h.outside.waitType(t, backends.EventPermissionResolved)
			if !strings.Contains(string(ev.Data), "no_handler") {
				t.Errorf("permission.resolved data = %s", ev.Data)
			}
		})
	}
}

func TestPermissionHandlerAndCancel(t *testing.T) {
	var mu sync.Mutex
	var seen []acp.PermissionRequest
	asked := make(chan struct{}, 1)
	perm := func(ctx context.Context, req acp.PermissionRequest) (acp.PermissionOutcome, error) {
		mu.Lock()
		seen = append(seen, req)
		n := len(seen)
		mu.Unlock()
		if n == 1 {
			for _, o := range req.Options {
				if o.Kind == "allow_once" {
					return acp.PermissionOutcome{OptionID: o.ID}, nil
				}
			}
		}
		asked <- struct{}{}
		<-ctx.Done() // a person who never answers
		return acp.PermissionOutcome{Cancelled: true}, nil
	}
	s := agenttest.Script{Turns: []agenttest.Turn{permissionTurn(nil), permissionTurn(nil)}}
	h := newBackend(t, s, acp.Config{Permissions: perm})
	h.start(t, "")
	if _, err := h.prompt(t, "1"); err != nil {
		t.Fatal(err)
	}
	if tx := h.turn.texts(backends.RoleAgent); !contains(tx, "permission: allow_once") || !contains(tx, "did it") {
		t.Fatalf("texts = %q; want allowed", tx)
	}
	mu.Lock()
	if seen[0].Kind != "execute" || seen[0].Title != "Run rm" || len(seen[0].Options) != 3 || seen[0].Turn != 1 {
		t.Errorf("request = %+v", seen[0])
	}
	mu.Unlock()
	ch := make(chan backends.TurnResult, 1)
	go func() { r, _ := h.prompt(t, "2"); ch <- r }()
	<-asked
	if err := h.b.Cancel(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.StopReason != backends.StopCancelled {
		t.Fatalf("StopReason = %q; want cancelled", r.StopReason)
	}
	if tx := h.turn.texts(backends.RoleAgent); !contains(tx, "permission cancelled") {
		t.Fatalf("texts = %q; want the pending request answered cancelled", tx)
	}
}

func TestUnknownMethodsAndNotifications(t *testing.T) {
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{Notify: &agenttest.RawCall{Method: "qwen/notify/progress", Params: json.RawMessage(`{"x":1}`)}},
		{Request: &agenttest.RawCall{Method: "craft/drainMidTurnQueue", Params: json.RawMessage(`{}`)}},
		{Chunk: "still fine"},
	}}}}
	h := newBackend(t, s, acp.Config{})
	h.start(t, "")
	if _, err := h.prompt(t, "x"); err != nil {
		t.Fatal(err)
	}
	tx := h.turn.texts(backends.RoleAgent)
	if !contains(tx, "-32601") || !contains(tx, "still fine") {
		t.Fatalf("texts = %q; want method-not-found and the turn going on", tx)
	}
}

func TestLargeLineUnderLimit(t *testing.T) {
	h := newBackend(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{BigLine: 9 << 20}}}}}, acp.Config{})
	h.start(t, "")
	if _, err := h.prompt(t, "x"); err != nil {
		t.Fatal(err)
	}
	tx := h.turn.texts(backends.RoleAgent)
	if len(tx) != 1 || len(tx[0]) != 9<<20 {
		t.Fatalf("got %d chunks; want one of 9 MiB", len(tx))
	}
}

// A hostile agent (garbage, an oversized line) ends its own backend with a
// clear error; another backend running beside it is not disturbed.
func TestHostileAgentsEndOnlyThemselves(t *testing.T) {
	healthy := newBackend(t, agenttest.Script{}, acp.Config{})
	healthy.start(t, "")
	for _, tc := range []struct {
		name string
		step agenttest.Step
		want string
	}{
		{"garbage", agenttest.Step{Garbage: "this is not json {"}, "not JSON-RPC"},
		{"json but not json-rpc", agenttest.Step{Garbage: `{"hello":"world"}`}, "not JSON-RPC"},
		{"12 MiB line", agenttest.Step{BigLine: 12 << 20}, "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newBackend(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "before"}, tc.step, {WaitCancel: true}}}}}, acp.Config{})
			h.start(t, "")
			res, err := h.prompt(t, "x")
			if !errors.Is(err, acp.ErrProtocol) || !strings.Contains(err.Error(), tc.want) || res.StopReason != backends.StopError {
				t.Fatalf("Prompt = %+v, %v; want a protocol error containing %q", res, err, tc.want)
			}
			<-h.b.Done()
			if !errors.Is(h.b.Err(), acp.ErrProtocol) {
				t.Errorf("Err() = %v; want ErrProtocol", h.b.Err())
			}
			if res, err := healthy.prompt(t, "still there?"); err != nil || res.StopReason != backends.StopEndTurn {
				t.Fatalf("healthy backend: %+v, %v", res, err)
			}
		})
	}
}

func TestAgentThatStopsReadingIsStopped(t *testing.T) {
	h := newBackend(t, agenttest.Script{StopReadingAfterNew: true}, acp.Config{WriteTimeout: 300 * time.Millisecond})
	h.start(t, "")
	start := time.Now()
	_, err := h.prompt(t, strings.Repeat("p", 4<<20)) // more than a pipe holds
	if !errors.Is(err, acp.ErrProtocol) || !strings.Contains(err.Error(), "stopped reading") {
		t.Fatalf("Prompt error = %v; want 'stopped reading its stdin'", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("blocked writer released after %v", d)
	}
	<-h.b.Done()
}

func TestLoadSession(t *testing.T) {
	s := agenttest.Script{
		LoadSession: true,
		Replay: []agenttest.Step{
			{Chunk: "old history"},
			{Update: json.RawMessage(`{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"resume-cmd","description":"x"}]}`)},
		},
	}
	h := newBackend(t, s, acp.Config{})
	info := h.start(t, "sess-123")
	if !info.Resumed || info.AgentSessionID != "sess-123" || info.ContextLost {
		t.Fatalf("Info = %+v; want resumed sess-123", info)
	}
	h.outside.waitType(t, backends.EventCommands)
	if tx := h.outside.texts(backends.RoleAgent); len(tx) != 0 {
		t.Errorf("replayed history re-emitted as live output: %q", tx)
	}
	if got := history(t, h.outside.all()); len(got) != 1 || got[0].Type != backends.EventMessageChunk {
		t.Errorf("history = %+v; want the old chunk", got)
	}
	if _, err := h.prompt(t, "x"); err != nil {
		t.Fatal(err)
	}
}

func TestLoadFallsBackToNewSession(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script agenttest.Script
		reason string
	}{
		{"load fails", agenttest.Script{LoadSession: true, LoadFails: true}, "Session not found"},
		{"no capability", agenttest.Script{}, "cannot resume or load sessions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newBackend(t, tc.script, acp.Config{})
			info := h.start(t, "gone")
			if info.Resumed || !info.ContextLost || info.AgentSessionID == "gone" || info.AgentSessionID == "" {
				t.Fatalf("Info = %+v; want a new session with context lost", info)
			}
			ev := h.outside.waitType(t, backends.EventAgentContextLost)
			if !strings.Contains(string(ev.Data), tc.reason) {
				t.Errorf("context_lost data = %s; want %q", ev.Data, tc.reason)
			}
		})
	}
}

func TestCapabilitiesAdvertisedOnlyWithHandlers(t *testing.T) {
	for _, withFS := range []bool{false, true} {
		var mu sync.Mutex
		var initLine string
		cfg := acp.Config{Wire: func(in bool, line []byte) {
			if !in && strings.Contains(string(line), `"initialize"`) {
				mu.Lock()
				initLine = string(line)
				mu.Unlock()
			}
		}}
		dir := t.TempDir()
		cfg.Spec.Dir = dir
		if withFS {
			fs, err := acpfs.NewFS(acpfs.FSConfig{Root: dir})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = fs.Close() })
			terms, err := acpfs.NewTerminals(acpfs.TerminalsConfig{Root: dir})
			if err != nil {
				t.Fatal(err)
			}
			cfg.FS, cfg.Terminals = fs, terms
		}
		h := newBackend(t, agenttest.Script{}, cfg)
		h.start(t, "")
		mu.Lock()
		var m struct {
			Params struct {
				ClientCapabilities struct {
					Fs struct {
						ReadTextFile, WriteTextFile bool
					} `json:"fs"`
					Terminal bool `json:"terminal"`
				} `json:"clientCapabilities"`
			} `json:"params"`
		}
		_ = json.Unmarshal([]byte(initLine), &m)
		mu.Unlock()
		c := m.Params.ClientCapabilities
		if c.Fs.ReadTextFile != withFS || c.Fs.WriteTextFile != withFS || c.Terminal != withFS {
			t.Errorf("with handlers=%v: capabilities = %+v", withFS, c)
		}
	}
}

func TestFSBridgeThroughBackend(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	writeFile(t, filepath.Join(dir, "in.txt"), "line1\nline2\nline3\n")
	writeFile(t, filepath.Join(outside, "secret.txt"), "secret")
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	var ops []acpfs.Op
	var mu sync.Mutex
	fs, err := acpfs.NewFS(acpfs.FSConfig{Root: dir, Audit: func(op acpfs.Op) { mu.Lock(); ops = append(ops, op); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Close() })
	terms, err := acpfs.NewTerminals(acpfs.TerminalsConfig{Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{Read: &agenttest.FileOp{Path: "in.txt", Line: intp(2), Limit: intp(1), Echo: true}},
		{Read: &agenttest.FileOp{Path: "missing.txt", Echo: true}},
		{Read: &agenttest.FileOp{Path: "escape/secret.txt", Echo: true}},
		{Read: &agenttest.FileOp{Path: filepath.Join(outside, "secret.txt"), Echo: true}},
		{Write: &agenttest.FileOp{Path: "sub/dir/new.txt", Content: "hello {{prompt}}", Echo: true}},
		{Write: &agenttest.FileOp{Path: "empty.txt", Content: "", Echo: true}},
		{Write: &agenttest.FileOp{Path: "escape/planted.txt", Content: "x", Echo: true}},
		{Write: &agenttest.FileOp{Path: ".git/hooks/post-commit", Content: "x", Echo: true}},
		{Terminal: &agenttest.Terminal{Command: "echo from-terminal; pwd"}},
	}}}}
	h := newBackend(t, s, acp.Config{Spec: backends.Spec{Dir: dir}, FS: fs, Terminals: terms})
	h.start(t, "")
	if _, err := h.prompt(t, "world"); err != nil {
		t.Fatal(err)
	}
	tx := h.turn.texts(backends.RoleAgent)
	checks := []string{"read: line2", "-32002", "wrote sub/dir/new.txt", "wrote empty.txt", "terminal output: from-terminal"}
	for _, want := range checks {
		if !contains(tx, want) {
			t.Errorf("agent texts lack %q: %q", want, tx)
		}
	}
	if contains(tx, "read: secret") {
		t.Fatal("a read escaped the worktree")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub/dir/new.txt")); err != nil || string(b) != "hello world" {
		t.Errorf("new.txt = %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "empty.txt")); err != nil || st.Size() != 0 {
		t.Errorf("empty.txt: %v, %v; want an empty file", st, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "planted.txt")); err == nil {
		t.Fatal("a write escaped the worktree through a symlink")
	}
	if _, err := os.Stat(filepath.Join(dir, ".git/hooks/post-commit")); err == nil {
		t.Fatal("a write into .git was allowed")
	}
	if !contains(tx, filepath.Base(dir)) {
		t.Errorf("terminal did not run in the worktree: %q", tx)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ops) < 8 {
		t.Errorf("audit ops = %d; want one per fs request", len(ops))
	}
}
