package pool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// TestSessionCloseReachesAgentOnlyAtClose: an evicted agent keeps its own
// session and takes it up again with session/resume; only closing the
// pooled session sends session/close.
func TestSessionCloseReachesAgentOnlyAtClose(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls")
	e := newEnv(t, map[string]any{"fake": providerEntry(agenttest.Script{ResumeSession: true, CloseSession: true, CallLog: log})}, nil)
	defer e.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := e.session("fake")
	e.prompt(s.ID, "", "a")
	if err := e.p.Evict(ctx, s.ID, "fake"); err != nil {
		t.Fatalf("Evict: %v", err)
	}
	waitUntil(t, "the evicted backend to leave the pool", func() bool { _, ok := backendOf(e.p, s.ID, "fake"); return !ok })
	e.prompt(s.ID, "", "b")
	if _, err := e.p.Close(ctx, s.ID, false); err != nil {
		t.Fatalf("Close: %v", err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "session/prompt" {
			continue
		}
		got = append(got, f[0])
		if len(f) > 1 && f[0] != "session/new" {
			ids = append(ids, f[1])
		}
	}
	if want := "session/new session/resume session/close"; strings.Join(got, " ") != want {
		t.Errorf("the agent got %q; want %q", strings.Join(got, " "), want)
	}
	// The resumed and closed session is the agent's own, from before the eviction.
	if len(ids) != 2 || ids[0] != ids[1] || ids[0] == "" {
		t.Errorf("session ids resumed and closed = %q; want one, the agent's own", ids)
	}
}

// TestCreateFromAgentSession: a session created from one of the agent's
// own sessions has the agent take it up in the session's worktree; an
// agent that refuses starts a new one and the stream says why.
func TestCreateFromAgentSession(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		log := filepath.Join(t.TempDir(), "calls")
		e := newEnv(t, map[string]any{"fake": providerEntry(agenttest.Script{ResumeSession: true, ResumeFails: refuse, CallLog: log})}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := e.p.Create(ctx, pool.CreateRequest{Repo: e.repo, Agent: "fake", AgentSession: "agent-own-1"})
		cancel()
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		e.prompt(s.ID, "", "go on")
		b, _ := os.ReadFile(log)
		if want := "session/resume agent-own-1 " + s.Worktree.Path; !strings.Contains(string(b), want) {
			t.Errorf("the agent got:\n%s\nwant %q", b, want)
		}
		lost := countType(e.events(s.ID), backends.EventAgentContextLost)
		if refuse && lost != 1 || !refuse && lost != 0 {
			t.Errorf("refused %v: %d agent.context_lost events", refuse, lost)
		}
		e.close()
	}
	e := newEnv(t, map[string]any{"fake": providerEntry(agenttest.Script{})}, nil)
	defer e.close()
	if _, err := e.p.Create(context.Background(), pool.CreateRequest{Repo: e.repo, Agent: "fake", AgentSession: "bad\nid"}); !errors.Is(err, pool.ErrInvalid) {
		t.Errorf("Create with a control character in agent_session = %v; want ErrInvalid", err)
	}
}
