package acp_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

func TestMain(m *testing.M) {
	agenttest.Dispatch()
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

func (r *recorder) types() []string {
	var out []string
	for _, e := range r.all() {
		out = append(out, string(e.Type))
	}
	return out
}

// texts returns the text of message chunks of the given role.
func (r *recorder) texts(role string) []string {
	var out []string
	for _, e := range r.all() {
		if e.Type != backends.EventMessageChunk {
			continue
		}
		var c backends.ChunkData
		_ = json.Unmarshal(e.Data, &c)
		if c.Role == role {
			out = append(out, c.Text)
		}
	}
	return out
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
	b       *acp.Backend
	dir     string
	turn    *recorder // events emitted during turns
	outside *recorder // events through OnEvent
}

// newBackend builds a backend running the scripted agent; cfg's Spec is filled in.
func newBackend(t *testing.T, s agenttest.Script, cfg acp.Config) *harness {
	t.Helper()
	h := &harness{turn: &recorder{}, outside: &recorder{}}
	dir := cfg.Spec.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	h.dir = dir
	spec := agenttest.Spec("fake", s)
	spec.Dir = dir
	spec.TurnTimeout = cfg.Spec.TurnTimeout
	spec.Permissions, spec.Mode, spec.Compat = cfg.Spec.Permissions, cfg.Spec.Mode, cfg.Spec.Compat
	spec.MCPServers = cfg.Spec.MCPServers
	cfg.Spec = spec
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 200 * time.Millisecond
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = 200 * time.Millisecond
	}
	if cfg.OnEvent == nil {
		cfg.OnEvent = h.outside.add
	}
	b, err := acp.New(cfg)
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
		if pid := b.Info().PID; pid != 0 && backends.GroupAlive(pid) {
			t.Errorf("process group %d still alive after Stop: %v", pid, backends.GroupMembers(pid))
		}
	})
	return h
}

func (h *harness) start(t *testing.T, resume string) backends.Info {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info, err := h.b.Start(ctx, resume)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return info
}

func (h *harness) prompt(t *testing.T, text string) (backends.TurnResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return h.b.Prompt(ctx, backends.Prompt{Text: text, Turn: 1}, h.turn.add)
}

func contains(list []string, want string) bool {
	for _, s := range list {
		if strings.Contains(s, want) {
			return true
		}
	}
	return false
}

func intp(i int) *int { return &i }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
