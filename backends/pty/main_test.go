package pty_test

import (
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/pty"
	"github.com/agentpool/agentpool/backends/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.MaybeLaunch()
	if os.Getenv(envFake) != "" {
		runFakeTUI()
		os.Exit(0)
	}
	if path := os.Getenv(envReplay); path != "" {
		runReplay(path)
	}
	if os.Getenv(envFakeAider) != "" {
		runFakeAider()
	}
	agenttest.Dispatch()
	// Started in the background by a shell without job control, this
	// process ignores SIGINT and so would every program it starts, and
	// Ctrl-C could not interrupt them. A handler (as the daemon installs
	// for its own shutdown) is reset to the default in children.
	if signal.Ignored(syscall.SIGINT) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGINT)
	}
	goleak.VerifyTestMain(m)
}

// recorder collects events, safely.
type recorder struct {
	mu  sync.Mutex
	evs []backends.Event
}

func (r *recorder) add(e backends.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

func (r *recorder) all() []backends.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]backends.Event(nil), r.evs...)
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.evs = nil
	r.mu.Unlock()
}

func (r *recorder) types() []string {
	var out []string
	for _, e := range r.all() {
		out = append(out, string(e.Type))
	}
	return out
}

// chunks returns the texts of the agent's message chunks.
func (r *recorder) chunks() []string {
	var out []string
	for _, e := range r.all() {
		if e.Type != backends.EventMessageChunk {
			continue
		}
		var c backends.ChunkData
		_ = json.Unmarshal(e.Data, &c)
		if c.Role == backends.RoleAgent {
			out = append(out, c.Text)
		}
	}
	return out
}

// output returns the raw bytes of all pty.output events and the sum of
// their dropped counts.
func (r *recorder) output() (string, int) {
	var sb strings.Builder
	dropped := 0
	for _, e := range r.all() {
		if e.Type != backends.EventPTYOutput {
			continue
		}
		var d pty.OutputData
		_ = json.Unmarshal(e.Data, &d)
		sb.Write(d.Bytes)
		dropped += d.Dropped
	}
	return sb.String(), dropped
}

func (r *recorder) waitType(t *testing.T, typ backends.EventType) backends.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range r.all() {
			if e.Type == typ {
				return e
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no %s event; have %v", typ, r.types())
	return backends.Event{}
}

type harness struct {
	b       *pty.Backend
	turn    *recorder // events emitted during turns
	outside *recorder // events through OnEvent
}

// fakeSpec returns a spec running the fake TUI with extra environment.
func fakeSpec(t testing.TB, env ...string) backends.Spec {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return backends.Spec{
		Provider: "fake",
		Kind:     backends.KindPTY,
		Path:     exe,
		// Under -race a process sleeps a second at exit unless told not to.
		Env: append([]string{envFake + "=1", "GORACE=atexit_sleep_ms=0"}, env...),
		Dir: t.TempDir(),
		PTY: backends.PTYSpec{ReadyPattern: readyPattern, Cols: 80, Rows: 24},
	}
}

// newHarness builds a backend for cfg (short grace periods unless set) and
// stops it at the end of the test, checking that nothing of it is left.
func newHarness(t testing.TB, cfg pty.Config) *harness {
	t.Helper()
	h := &harness{turn: &recorder{}, outside: &recorder{}}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 200 * time.Millisecond
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = 200 * time.Millisecond
	}
	if cfg.OnEvent == nil {
		cfg.OnEvent = h.outside.add
	}
	if cfg.SubmitDelay == 0 {
		cfg.SubmitDelay = -1
	}
	b, err := pty.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.b = b
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if pid := b.Info().PID; pid != 0 {
			if left := pty.SessionMembers(pid); len(left) > 0 {
				t.Errorf("session %d still has processes after Stop: %v", pid, left)
			}
		}
	})
	return h
}

func (h *harness) start(t testing.TB, resume string) backends.Info {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info, err := h.b.Start(ctx, resume)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return info
}

func (h *harness) prompt(t testing.TB, text string) (backends.TurnResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return h.b.Prompt(ctx, backends.Prompt{Text: text, Turn: 1}, h.turn.add)
}

// waitScreen waits until the screen contains want.
// waitUntilScreen polls the screen until ok accepts it.
func waitUntilScreen(t testing.TB, b *pty.Backend, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s := b.Screen(); !ok(s); s = b.Screen() {
		if time.Now().After(deadline) {
			t.Fatalf("Screen() never showed the %s; have:\n%s", what, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitScreen(t testing.TB, b *pty.Backend, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := b.Screen()
		if strings.Contains(s, want) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("Screen() never contained %q; have:\n%s", want, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
