package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeAPI is an API of func fields; a nil field answers "not faked".
type fakeAPI struct {
	session     func(id string) (pool.Session, error)
	turn        func(session string, turn int64) (pool.Turn, error)
	events      func(ctx context.Context, session string, after int64, fn func(backends.Event) error) error
	permissions func(session string) ([]permission.Pending, error)
	diff        func(session string, turn int64) (pool.Diff, error)
	call        func(method, path string, body, out any) error
	providers   func() (registry.Snapshot, error)
}

var errNotFaked = errors.New("not faked")

func (f *fakeAPI) Providers(context.Context) (registry.Snapshot, error) {
	if f.providers == nil {
		return registry.Snapshot{}, errNotFaked
	}
	return f.providers()
}
func (f *fakeAPI) Sessions(context.Context) ([]pool.Session, error) { return nil, errNotFaked }
func (f *fakeAPI) Session(_ context.Context, id string) (pool.Session, error) {
	if f.session == nil {
		return pool.Session{}, errNotFaked
	}
	return f.session(id)
}
func (f *fakeAPI) CreateSession(context.Context, pool.CreateRequest) (pool.Session, error) {
	return pool.Session{}, errNotFaked
}
func (f *fakeAPI) CreateSessionPrompt(context.Context, pool.CreateRequest, string) (httpapi.CreatedSession, error) {
	return httpapi.CreatedSession{}, errNotFaked
}
func (f *fakeAPI) CloseSession(context.Context, string, bool) (pool.CloseResult, error) {
	return pool.CloseResult{}, errNotFaked
}
func (f *fakeAPI) Prompt(context.Context, string, string, string, bool) (pool.Turn, error) {
	return pool.Turn{}, errNotFaked
}
func (f *fakeAPI) Turn(_ context.Context, session string, turn int64, _ bool) (pool.Turn, error) {
	if f.turn == nil {
		return pool.Turn{ID: turn, Session: session, Agent: "fake"}, nil
	}
	return f.turn(session, turn)
}
func (f *fakeAPI) Cancel(context.Context, string) error { return errNotFaked }
func (f *fakeAPI) Events(ctx context.Context, session string, after int64, fn func(backends.Event) error) error {
	if f.events == nil {
		return errNotFaked
	}
	return f.events(ctx, session, after, fn)
}
func (f *fakeAPI) Permissions(_ context.Context, session string) ([]permission.Pending, error) {
	if f.permissions == nil {
		return nil, errNotFaked
	}
	return f.permissions(session)
}
func (f *fakeAPI) Answer(context.Context, string, string, string) error { return errNotFaked }
func (f *fakeAPI) Diff(_ context.Context, session string, turn int64) (pool.Diff, error) {
	if f.diff == nil {
		return pool.Diff{}, errNotFaked
	}
	return f.diff(session, turn)
}
func (f *fakeAPI) MergeSession(context.Context, string, pool.MergeRequest) (pool.MergeResult, error) {
	return pool.MergeResult{}, errNotFaked
}
func (f *fakeAPI) Call(_ context.Context, method, path string, body, out any) error {
	if f.call == nil {
		return errNotFaked
	}
	return f.call(method, path, body, out)
}

var _ API = (*fakeAPI)(nil)
var _ API = (*httpapi.Client)(nil)

// connect runs a server of cfg (its Connect answering api) and returns a
// client session to it, with the progress messages it gets.
func connect(t *testing.T, cfg Config, api API) (*mcp.ClientSession, func() []string) {
	t.Helper()
	cfg.Connect = func(context.Context) (API, error) { return api, nil }
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx, st) })
	var mu sync.Mutex
	var progress []string
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, req.Params.Message)
		},
	})
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		wg.Wait()
	})
	// Notifications are handled apart from the result they precede: give
	// them a moment to arrive.
	return cs, func() []string {
		for range 100 {
			mu.Lock()
			n := len(progress)
			mu.Unlock()
			if n > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), progress...)
	}
}

// callTool calls tool and returns its text, structured content and
// whether it is an error.
func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, token any) (string, map[string]any, bool) {
	t.Helper()
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	if token != nil {
		p.SetProgressToken(token)
	}
	res, err := cs.CallTool(context.Background(), p)
	if err != nil {
		t.Fatalf("CallTool(%s) = %v", tool, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	var sc map[string]any
	if res.StructuredContent != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &sc)
	}
	return b.String(), sc, res.IsError
}

// ev makes an event of turn 1.
func ev(seq int64, typ backends.EventType, data string) backends.Event {
	return backends.Event{Seq: seq, Session: "s1", Turn: 1, Type: typ, Data: json.RawMessage(data)}
}

// replay is an Events that delivers evs after `after`, then blocks until
// ctx ends (a turn that goes on).
func replay(evs ...backends.Event) func(context.Context, string, int64, func(backends.Event) error) error {
	return func(ctx context.Context, _ string, after int64, fn func(backends.Event) error) error {
		for _, e := range evs {
			if e.Seq <= after {
				continue
			}
			if err := fn(e); err != nil {
				if errors.Is(err, httpapi.ErrStop) {
					return nil
				}
				return err
			}
		}
		<-ctx.Done()
		return ctx.Err()
	}
}

func TestWaitTurnStates(t *testing.T) {
	chunks := []backends.Event{
		ev(1, backends.EventTurnStarted, `{}`),
		ev(2, backends.EventMessageChunk, `{"role":"thought","text":"hmm "}`),
		ev(3, backends.EventMessageChunk, `{"role":"agent","text":"Hello "}`),
		ev(4, backends.EventToolCall, `{"title":"Edit main.go"}`),
		{Seq: 5, Session: "s1", Turn: 2, Type: backends.EventMessageChunk, Data: json.RawMessage(`{"role":"agent","text":"other turn"}`)},
		ev(6, backends.EventMessageChunk, `{"role":"agent","text":"world."}`),
	}
	ended := ev(7, backends.EventTurnEnded, `{"stop_reason":"end_turn","duration_ms":1500,"changes":{"files":1,"additions":3,"deletions":1}}`)
	askedPerm := ev(7, backends.EventPermissionRequest, `{"request":"r1"}`)
	pending := []permission.Pending{{ID: "r1", Risk: "high", Request: permission.Request{Session: "s1", Agent: "fake", Turn: 1,
		Title: "rm -rf build", Action: "execute", Options: []permission.Option{{ID: "a", Kind: permission.KindAllowOnce}, {ID: "r", Kind: permission.KindRejectOnce}}}}}
	diff := func(string, int64) (pool.Diff, error) {
		return pool.Diff{Files: []pool.FileChange{{Path: "main.go", Status: "modified", Additions: 3, Deletions: 1}}}, nil
	}
	tests := []struct {
		name      string
		events    []backends.Event
		pending   []permission.Pending
		wantState string
		wantText  []string
	}{
		{"ended", append(chunks, ended), nil, stateEnded,
			[]string{"Turn 1 of session s1 ended: end_turn after 1.5s.", "It changed 1 file (+3 −1):\n  modified main.go +3 −1\n", "The agent's final text:\nHello\nworld.\n"}}, // a tool call between two messages
		{"running", chunks, nil, stateRunning,
			[]string{"Turn 1 of session s1 is still running", "1 tool call, 2 text chunks so far; last tool call: Edit main.go", "Call wait_turn again"}},
		{"permission", append(chunks, askedPerm), pending, statePermission,
			[]string{"waits for an answer to 1 permission request", "- request r1: agent fake asks to execute: \"rm -rf build\" (the agent's words); risk high", "choices: allow_once, reject_once"}},
		{"permission answered", append(append(chunks, askedPerm), ended), nil, stateEnded, []string{"ended: end_turn"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &fakeAPI{events: replay(tt.events...), diff: diff,
				permissions: func(string) ([]permission.Pending, error) { return tt.pending, nil }}
			cs, progress := connect(t, Config{MaxWait: time.Second}, api)
			text, sc, isErr := callTool(t, cs, "wait_turn", map[string]any{"session": "s1", "turn": 1}, "tok")
			if isErr || sc["state"] != tt.wantState {
				t.Fatalf("wait_turn = %q (error %v), state %v; want %s", text, isErr, sc["state"], tt.wantState)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(text, w) {
					t.Errorf("wait_turn text lacks %q:\n%s", w, text)
				}
			}
			if p := progress(); len(p) == 0 || !strings.Contains(strings.Join(p, "\n"), "tool call 1: Edit main.go") {
				t.Errorf("progress = %q; want the tool call", p)
			}
		})
	}
}

// TestWaitTurnKeepsTheEnd: a turn's text longer than MaxText is cut at its
// start, where the agent's final words are not.
func TestWaitTurnKeepsTheEnd(t *testing.T) {
	var evs []backends.Event
	for i := range 100 {
		evs = append(evs, ev(int64(i+1), backends.EventMessageChunk, fmt.Sprintf(`{"role":"agent","text":"part %03d. "}`, i)))
	}
	evs = append(evs, ev(101, backends.EventTurnEnded, `{"stop_reason":"end_turn"}`))
	cs, _ := connect(t, Config{MaxText: 100}, &fakeAPI{events: replay(evs...)})
	text, sc, _ := callTool(t, cs, "wait_turn", map[string]any{"session": "s1", "turn": 1}, nil)
	if sc["text_cut"] != true || !strings.Contains(text, "part 099. ") || strings.Contains(text, "part 000") {
		t.Errorf("wait_turn = %q; want the end of the text only, said to be cut", text)
	}
}

// TestWaitReadsFromTheTurnOn: a wait for a turn reads the session's events
// from where they were at the prompt, or, for a turn started elsewhere,
// from its first event once a wait has seen it.
func TestWaitReadsFromTheTurnOn(t *testing.T) {
	var afters []int64
	events := func(ctx context.Context, _ string, after int64, fn func(backends.Event) error) error {
		afters = append(afters, after)
		return replay(ev(41, backends.EventTurnStarted, `{}`))(ctx, "s1", after, fn)
	}
	api := &fakeAPI{events: events,
		session: func(id string) (pool.Session, error) { return pool.Session{ID: id, LastSeq: 17}, nil }}
	prompted := &promptingAPI{fakeAPI: api, turn: pool.Turn{ID: 5, Session: "s1", Agent: "fake"}}
	cs, _ := connect(t, Config{MaxWait: 100 * time.Millisecond}, prompted)
	callTool(t, cs, "wait_turn", map[string]any{"session": "s1", "turn": 1}, nil)
	callTool(t, cs, "wait_turn", map[string]any{"session": "s1", "turn": 1}, nil)
	callTool(t, cs, "prompt", map[string]any{"session": "s1", "text": "go", "wait_seconds": 1}, nil)
	callTool(t, cs, "wait_turn", map[string]any{"session": "s1", "turn": 5}, nil)
	if want := []int64{0, 40, 17, 17}; !slices.Equal(afters, want) {
		t.Errorf("Events read after seqs %v; want %v", afters, want)
	}
}

// promptingAPI is a fakeAPI whose Prompt starts turn.
type promptingAPI struct {
	*fakeAPI
	turn pool.Turn
}

func (p *promptingAPI) Prompt(context.Context, string, string, string, bool) (pool.Turn, error) {
	return p.turn, nil
}

func TestErrorsAreToolErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"daemon refusal", &httpapi.Error{Status: http.StatusNotFound, Code: httpapi.CodeNotFound, Message: `session "nope" not found`},
			`agentpool refused: session "nope" not found [code not_found, HTTP 404]`},
		{"no daemon", fmt.Errorf("GET /v1/sessions/x: %w", syscall.ECONNREFUSED),
			"cannot reach the agentpool daemon (is it running? the user starts it with: agentpool serve)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &fakeAPI{session: func(string) (pool.Session, error) { return pool.Session{}, tt.err }}
			cs, _ := connect(t, Config{}, api)
			text, _, isErr := callTool(t, cs, "get_session", map[string]any{"session": "nope"}, nil)
			if !isErr || !strings.HasPrefix(text, tt.want) {
				t.Errorf("get_session = %q (error %v); want a tool error starting %q", text, isErr, tt.want)
			}
		})
	}
	t.Run("no connection", func(t *testing.T) {
		srv, err := New(Config{Connect: func(context.Context) (API, error) { return nil, errors.New("no daemon found in /x") },
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ct, st := mcp.NewInMemoryTransports()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { _ = srv.Run(ctx, st) })
		defer func() { cancel(); wg.Wait() }()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		text, _, isErr := callTool(t, cs, "list_sessions", nil, nil)
		if !isErr || text != "connect to the agentpool daemon: no daemon found in /x" {
			t.Errorf("list_sessions = %q (error %v); want the connection's error", text, isErr)
		}
	})
}

func TestAttemptsTools(t *testing.T) {
	set := `{"id":"att-1","prompt":"fix it","repo":"/r","base_commit":"0123456789abcdef","check":"go test ./...","state":"%s","picked":"%s",
		"attempts":[{"session":"s1","agent":"claude","turn":1,"state":"done","stop_reason":"end_turn","duration_ms":61000,"files_changed":2,"lines_added":10,"lines_removed":1,"check":{"state":"passed","exit_code":0}},
		{"session":"s2","agent":"codex","turn":1,"state":"done","stop_reason":"end_turn","files_changed":1,"lines_added":3,"lines_removed":0,"check":{"state":"failed","exit_code":1,"output":"--- FAIL: TestX\nFAIL"}}]%s}`
	type sent struct {
		Method, Path string
		Body         map[string]any
	}
	var calls []sent
	api := &fakeAPI{call: func(method, path string, body, out any) error {
		var b map[string]any
		if body != nil {
			raw, _ := json.Marshal(body)
			_ = json.Unmarshal(raw, &b)
		}
		calls = append(calls, sent{method, path, b})
		answer := fmt.Sprintf(set, "done", "", "")
		switch {
		case strings.HasSuffix(path, "/pick"):
			answer = fmt.Sprintf(set, "picked", "s1", `,"merge":{"session":"s1","branch":"agentpool/s1","into":"main","method":"fast-forward","updated":"refs/heads/main","before":"aaa","head":"bbb"}`)
		case path == "/v1/attempts" && method == http.MethodGet:
			answer = "[" + answer + "]"
		}
		return json.Unmarshal([]byte(answer), out)
	}}
	cs, _ := connect(t, Config{WorkDir: "/home/me/proj", MaxWait: 5 * time.Second}, api)

	text, _, isErr := callTool(t, cs, "start_attempts", map[string]any{"prompt": "fix it", "repo": "sub", "agents": []string{"claude", "codex"}, "check": "go test ./..."}, nil)
	if isErr || !strings.Contains(text, "Attempts att-1 (done): 2 attempts") {
		t.Errorf("start_attempts = %q", text)
	}
	text, _, _ = callTool(t, cs, "get_attempts", map[string]any{"id": "att-1", "wait_seconds": 500}, "tok")
	for _, w := range []string{"session s1, agent claude: done (end_turn), 1m1s, 2 files changed +10 −1, check passed",
		"session s2, agent codex: done (end_turn), 1 file changed +3 −0, check failed (exit 1)", "check output (end): --- FAIL: TestX", "pick_attempt"} {
		if !strings.Contains(text, w) {
			t.Errorf("get_attempts text lacks %q:\n%s", w, text)
		}
	}
	text, _, _ = callTool(t, cs, "list_attempts", nil, nil)
	if !strings.Contains(text, "- att-1: done, 2 attempts, fix it") {
		t.Errorf("list_attempts = %q", text)
	}
	text, _, _ = callTool(t, cs, "pick_attempt", map[string]any{"id": "att-1", "session": "s1", "squash": true}, nil)
	if !strings.Contains(text, "Picked: s1.") || !strings.Contains(text, "Merged agentpool/s1 into main (fast-forward)") {
		t.Errorf("pick_attempt = %q", text)
	}
	want := []sent{
		{"POST", "/v1/attempts", map[string]any{"prompt": "fix it", "repo": "/home/me/proj/sub", "agents": []any{"claude", "codex"}, "check": "go test ./..."}},
		{"GET", "/v1/attempts/att-1?wait=5", nil},
		{"GET", "/v1/attempts", nil},
		{"POST", "/v1/attempts/att-1/pick", map[string]any{"session": "s1", "discard": false, "squash": true}},
	}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("requests sent (-want +got):\n%s", diff)
	}
}

// TestWaitTellsWhatTheTurnWaitsFor: the session's setup and the agent's
// start, after the prompt, are progress of the turn.
func TestWaitTellsWhatTheTurnWaitsFor(t *testing.T) {
	evs := []backends.Event{
		{Seq: 17, Session: "s1", Type: pool.EventSetupEnded, Data: json.RawMessage(`{}`)}, // before the prompt
		{Seq: 18, Session: "s1", Type: pool.EventSetupStarted, Data: json.RawMessage(`{}`)},
		{Seq: 19, Session: "s1", Type: pool.EventSetupEnded, Data: json.RawMessage(`{}`)},
		{Seq: 20, Session: "s1", Agent: "other", Type: backends.EventAgentStarting, Data: json.RawMessage(`{}`)},
		{Seq: 21, Session: "s1", Agent: "fake", Type: backends.EventAgentStarting, Data: json.RawMessage(`{}`)},
		{Seq: 22, Session: "s1", Agent: "fake", Turn: 5, Type: backends.EventTurnEnded, Data: json.RawMessage(`{"stop_reason":"end_turn"}`)},
	}
	api := &promptingAPI{turn: pool.Turn{ID: 5, Session: "s1", Agent: "fake"}, fakeAPI: &fakeAPI{events: replay(evs...),
		session: func(id string) (pool.Session, error) { return pool.Session{ID: id, LastSeq: 17}, nil }}}
	cs, progress := connect(t, Config{}, api)
	text, _, _ := callTool(t, cs, "prompt", map[string]any{"session": "s1", "text": "go", "wait_seconds": 5}, "tok")
	want := []string{"turn 5: waiting for the worktree's setup (.agentpool.json) to run", "turn 5: the worktree's setup ended",
		"turn 5: starting the agent fake", "turn 5 ended: end_turn"}
	if got := progress(); !slices.Equal(got, want) {
		t.Errorf("progress = %q; want %q", got, want)
	}
	if !strings.Contains(text, "Started turn 5 of session s1") || !strings.Contains(text, "ended: end_turn") {
		t.Errorf("prompt with wait_seconds = %q; want the turn started and ended", text)
	}
}

// TestListProvidersNetworkRefused: a caller that delegates to agents
// learns which connections they were refused, and the entry that would
// allow each.
func TestListProvidersNetworkRefused(t *testing.T) {
	snap := registry.Snapshot{Providers: []registry.ProviderStatus{{ID: "codex", Label: "Codex", Status: registry.StatusReady,
		NetworkRefused: []registry.NetworkRefusal{{Host: "db.example.com", Port: 5432, Reason: "db.example.com resolves to 10.1.2.3, a private address", Allow: "10.1.2.3:5432"}}}}}
	cs, _ := connect(t, Config{}, &fakeAPI{providers: func() (registry.Snapshot, error) { return snap, nil }})
	text, sc, isErr := callTool(t, cs, "list_providers", nil, nil)
	want := `network refused db.example.com:5432 (db.example.com resolves to 10.1.2.3, a private address); the entry "10.1.2.3:5432" in its sandbox.network would allow it`
	if isErr || !strings.Contains(text, want) {
		t.Errorf("list_providers = %q (error %v); want %q", text, isErr, want)
	}
	if ps, _ := sc["providers"].([]any); len(ps) != 1 || ps[0].(map[string]any)["network_refused"] == nil {
		t.Errorf("structured providers = %v; want network_refused", sc["providers"])
	}
}
