package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/httpapi/apitest"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	"go.uber.org/goleak"
)

const cliTestToken = "cli-test-token"

// cliEnv is an httpapi.Server over a fake pool, found by the client
// through a data directory, as a running daemon would be.
type cliEnv struct {
	fp   *apitest.Pool
	log  *apitest.EventLog
	reg  *registry.Registry
	ts   *httptest.Server
	home string
	api  *httpapi.Client

	wg      sync.WaitGroup // scripted turns
	pending chan string    // permission requests published
	answers chan string    // choices given to Answer
	prompts chan pool.PromptRequest
	cancels chan string
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) }) // runs last
	home := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg, err := registry.New(registry.Config{Path: filepath.Join(home, "providers.json"), Logger: quiet})
	if err != nil {
		t.Fatalf("registry.New() error = %v", err)
	}
	src, err := apitest.NewSubscriptions()
	if err != nil {
		t.Fatal(err)
	}
	e := &cliEnv{fp: &apitest.Pool{}, log: apitest.NewEventLog(src, 1024), reg: reg, home: home,
		pending: make(chan string, 8), answers: make(chan string, 8), prompts: make(chan pool.PromptRequest, 8), cancels: make(chan string, 8)}
	e.world()
	srv, err := httpapi.New(httpapi.Config{Pool: e.fp, Registry: reg, Token: cliTestToken, Logger: quiet, Version: "v-test"})
	if err != nil {
		t.Fatalf("httpapi.New() error = %v", err)
	}
	e.ts = httptest.NewServer(srv)
	e.api = &httpapi.Client{BaseURL: e.ts.URL, Token: cliTestToken}
	t.Cleanup(func() {
		srv.Shutdown()
		e.ts.Close()
		e.wg.Wait()
		_ = reg.Close()
	})
	if err := writeDaemonFile(home, daemonInfo{Addr: e.ts.Listener.Addr().String(), PID: os.Getpid()}); err != nil {
		t.Fatalf("writeDaemonFile() error = %v", err)
	}
	if err := os.WriteFile(filepath.Join(home, tokenFileName), []byte(cliTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// run runs a client command as runClient does, with stdin and the
// terminal flags given.
func (e *cliEnv) run(t *testing.T, ctx context.Context, inTTY, outTTY bool, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	c := &cli{env: ClientEnv{Home: e.home}, stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, inTTY: inTTY, outTTY: outTTY}
	handled, err := c.run(ctx, args[0], args[1:])
	if !handled {
		t.Fatalf("run(%q) not handled", args)
	}
	return out.String(), errOut.String(), err
}

// world gives the fake pool session s1 (and "missing"), a scripted turn
// and canned answers for the other calls.
func (e *cliEnv) world() {
	fp := e.fp
	wt := pool.Worktree{Session: "s1", Repo: "/repo", Path: "/data/worktrees/s1", Branch: "agentpool/s1", BaseCommit: "abc123"}
	sess := func(id string) pool.Session {
		return pool.Session{ID: id, Repo: "/repo", ActiveAgent: "demo", Status: pool.StatusOpen, Worktree: wt,
			LastSeq: int64(e.log.Len()), CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
			Agents: []pool.AgentStatus{{Session: id, Agent: "demo", Kind: backends.KindACP, State: pool.StateIdle, PID: 4242, RSS: 64 << 20, IdleFor: 75 * time.Second}}}
	}
	notFound := func(id string) error {
		if id != "s1" {
			return fmt.Errorf("session %q: %w", id, pool.ErrNotFound)
		}
		return nil
	}
	fp.GetFunc = func(_ context.Context, id string) (pool.Session, error) { return sess(id), notFound(id) }
	fp.ListFunc = func(context.Context) ([]pool.Session, error) { return []pool.Session{sess("s1")}, nil }
	fp.CreateFunc = func(_ context.Context, r pool.CreateRequest) (pool.Session, error) {
		s := sess("s-new")
		s.Repo, s.ActiveAgent, s.Title = r.Repo, r.Agent, r.Title
		s.Worktree.Repo = r.Repo
		return s, nil
	}
	fp.CloseFunc = func(_ context.Context, id string, discard bool) (pool.CloseResult, error) {
		return pool.CloseResult{Session: id, Worktree: pool.RemoveResult{Branch: "agentpool/" + id, Committed: !discard,
			Commit: "0123456789abcdef", Discarded: discard}}, notFound(id)
	}
	fp.TurnsFunc = func(_ context.Context, id string) ([]pool.Turn, error) {
		end := time.Date(2025, 1, 2, 3, 5, 0, 0, time.UTC)
		return []pool.Turn{{ID: 1, Session: id, Agent: "demo", Prompt: "first\nrequest", StopReason: "end_turn", StartedAt: end, EndedAt: &end}}, notFound(id)
	}
	fp.SubscribeFunc = func(_ context.Context, id string, after int64) (*pool.Subscription, error) {
		if err := notFound(id); err != nil {
			return nil, err
		}
		return e.log.Subscribe(after), nil
	}
	fp.StartPromptFunc = func(ctx context.Context, r pool.PromptRequest) (pool.Turn, error) {
		if err := notFound(r.Session); err != nil {
			return pool.Turn{}, err
		}
		e.prompts <- r
		t := pool.Turn{ID: 3, Session: r.Session, Agent: "demo", Prompt: r.Text, StartedAt: time.Now()}
		e.wg.Add(1)
		go func() { defer e.wg.Done(); e.script(t) }()
		return t, nil
	}
	fp.AnswerFunc = func(session, request, choice string) error {
		if request != "r1" {
			return fmt.Errorf("answer %q: %w", request, permission.ErrUnknownRequest)
		}
		e.answers <- choice
		return nil
	}
	fp.CancelFunc = func(_ context.Context, id string) error {
		e.cancels <- id
		e.answers <- "cancelled"
		return nil
	}
	fp.PendingFunc = func(session string) []permission.Pending {
		return []permission.Pending{{ID: "r1", Risk: "medium", Deadline: time.Date(2025, 1, 2, 3, 9, 0, 0, time.Local),
			Request: permission.Request{Session: session, Agent: "demo", Title: "Write AGENTPOOL_DEMO.md", Action: "edit",
				Options: []permission.Option{{ID: "allow", Kind: permission.KindAllowOnce}, {ID: "reject", Kind: permission.KindRejectOnce}}}}}
	}
	fp.DiffFunc = func(_ context.Context, id string, turn int64) (pool.Diff, error) {
		return pool.Diff{From: "abc123", Files: []pool.FileChange{{Path: "AGENTPOOL_DEMO.md", Status: "A", Additions: 5}},
			Stat:  pool.DiffStat{Files: 1, Additions: 5},
			Patch: "diff --git a/AGENTPOOL_DEMO.md b/AGENTPOOL_DEMO.md\n--- /dev/null\n+++ b/AGENTPOOL_DEMO.md\n@@ -0,0 +1 @@\n+# Written\n"}, notFound(id)
	}
	fp.RestoreFunc = func(_ context.Context, id string, turn int64, after bool) error { return notFound(id) }
	fp.BackendsFunc = func() []pool.AgentStatus { return sess("s1").Agents }
}

// script plays turn t as the demo agent does: it reads, asks permission to
// write, and writes when allowed; a refusal ends the turn with "refusal".
func (e *cliEnv) script(t pool.Turn) {
	add := func(typ backends.EventType, turn int64, data any) {
		e.log.Append(backends.Event{Session: t.Session, Agent: t.Agent, Turn: turn, Type: typ, Data: backends.MustJSON(data)})
	}
	add(backends.EventMessageChunk, 2, backends.ChunkData{Role: "agent", Text: "a late chunk of an older turn"})
	add(backends.EventAgentStarting, 0, map[string]any{"provider": "demo"})
	add(backends.EventAgentReady, 0, map[string]any{"pid": 4242})
	add(backends.EventTurnStarted, t.ID, map[string]any{"turn": t.ID, "prompt": t.Prompt})
	add(backends.EventMessageChunk, t.ID, backends.ChunkData{Role: backends.RoleUserEcho, Text: t.Prompt})
	add(backends.EventMessageChunk, t.ID, backends.ChunkData{Role: "thought", Text: "Looking at "})
	add(backends.EventMessageChunk, t.ID, backends.ChunkData{Role: "thought", Text: "the repository first."})
	add(backends.EventToolCall, t.ID, map[string]any{"sessionUpdate": "tool_call", "toolCallId": "read-1", "title": "Read README.md",
		"kind": "read", "status": "in_progress", "locations": []map[string]string{{"path": "README.md"}}})
	add(backends.EventToolUpdate, t.ID, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": "read-1", "status": "completed"})
	add(backends.EventMessageChunk, t.ID, backends.ChunkData{Role: "agent", Text: "I read README.md.\n"})
	add(backends.EventPermissionRequest, t.ID, map[string]any{"request": "r1", "title": "Write AGENTPOOL_DEMO.md", "kind": "edit",
		"risk": "medium", "options": []permission.Option{{ID: "allow", Kind: "allow_once"}, {ID: "always", Kind: "allow_always"}, {ID: "reject", Kind: "reject_once"}}})
	e.pending <- "r1"
	choice := <-e.answers
	if choice == "cancelled" {
		add(backends.EventTurnEnded, t.ID, map[string]any{"turn": t.ID, "stop_reason": "cancelled", "duration_ms": 300})
		return
	}
	allowed := strings.HasPrefix(choice, "allow")
	decision := map[bool]string{true: "allow", false: "deny"}[allowed]
	add(backends.EventPermissionResolved, t.ID, map[string]any{"request": "r1", "decision": decision, "decided_by": "user", "option_kind": choice})
	if !allowed {
		add(backends.EventMessageChunk, t.ID, backends.ChunkData{Role: "agent", Text: "Permission refused."})
		add(backends.EventTurnEnded, t.ID, map[string]any{"turn": t.ID, "stop_reason": "refusal", "duration_ms": 800})
		return
	}
	add(backends.EventToolUpdate, t.ID, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": "edit-1", "title": "Write AGENTPOOL_DEMO.md", "status": "completed"})
	add(backends.EventMessageChunk, t.ID, backends.ChunkData{Role: "agent", Text: "Done."})
	add(backends.EventTurnEnded, t.ID, map[string]any{"turn": t.ID, "stop_reason": "end_turn", "duration_ms": 1234,
		"changes": map[string]int{"files": 1, "additions": 5}})
}
