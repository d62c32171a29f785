package acp_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// calls reads a fake agent's call log: the session methods it got.
func calls(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if m, _, _ := strings.Cut(line, " "); m != "" && m != "session/prompt" {
			out = append(out, m)
		}
	}
	return out
}

// TestResumePreferredOverLoad: an agent that offers session/resume gets it
// (no history replayed) rather than session/load; one whose resume fails
// is loaded; one that can do neither starts a new session and the context
// loss says why.
func TestResumePreferredOverLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  agenttest.Script
		calls   string
		by      string
		lost    string
		history bool
	}{
		{"resume", agenttest.Script{ResumeSession: true, LoadSession: true}, "session/resume", "resume", "", false},
		{"resume fails, load", agenttest.Script{ResumeSession: true, ResumeFails: true, LoadSession: true}, "session/resume session/load", "load", "", true},
		{"both fail", agenttest.Script{ResumeSession: true, ResumeFails: true, LoadSession: true, LoadFails: true},
			"session/resume session/load session/new", "", "session/resume failed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.script
			s.CallLog = filepath.Join(t.TempDir(), "calls")
			s.Replay = []agenttest.Step{{Chunk: "old history"}}
			h := newBackend(t, s, acp.Config{})
			info := h.start(t, "sess-1")
			if got := strings.Join(calls(t, s.CallLog), " "); got != tc.calls {
				t.Errorf("agent got %q; want %q", got, tc.calls)
			}
			if tc.by != "" && (!info.Resumed || info.ResumedBy != tc.by || info.AgentSessionID != "sess-1") {
				t.Errorf("Info = %+v; want resumed by %s", info, tc.by)
			}
			if !info.Sessions.Resume {
				t.Errorf("Info.Sessions = %+v; want resume", info.Sessions)
			}
			if tc.lost != "" {
				ev := h.outside.waitType(t, backends.EventAgentContextLost)
				if !strings.Contains(string(ev.Data), tc.lost) || !strings.Contains(string(ev.Data), "session/load failed") {
					t.Errorf("context_lost = %s; want both refusals", ev.Data)
				}
			}
			if _, err := h.prompt(t, "x"); err != nil {
				t.Fatal(err)
			}
			// The prompt closes the replay window: what was replayed is in.
			if got := len(history(t, h.outside.all())) > 0; got != tc.history {
				t.Errorf("history replayed = %v; want %v", got, tc.history)
			}
		})
	}
}

// TestCloseSession: session/close reaches an agent that offers it; one
// that does not gets nothing and the caller learns it is unsupported.
func TestCloseSession(t *testing.T) {
	for _, offer := range []bool{true, false} {
		s := agenttest.Script{CloseSession: offer, CallLog: filepath.Join(t.TempDir(), "calls")}
		h := newBackend(t, s, acp.Config{})
		info := h.start(t, "")
		if info.Sessions.Close != offer {
			t.Errorf("Info.Sessions = %+v; want close %v", info.Sessions, offer)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := h.b.CloseSession(ctx)
		cancel()
		got := strings.Join(calls(t, s.CallLog), " ")
		if offer && (err != nil || got != "session/new session/close") {
			t.Errorf("CloseSession() = %v, agent got %q; want nil and session/close", err, got)
		}
		if !offer && (!errors.Is(err, backends.ErrUnsupported) || got != "session/new") {
			t.Errorf("CloseSession() = %v, agent got %q; want ErrUnsupported and nothing sent", err, got)
		}
	}
}

// TestProberListSessions: the agent is asked for its sessions of one
// directory without a session of the daemon's being made; an agent that
// cannot list says so.
func TestProberListSessions(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls")
	s := agenttest.Script{ListSessions: true, CallLog: log, Sessions: []agenttest.SessionInfo{
		{SessionID: "a1", Cwd: "/src/app", Title: "fix the parser", UpdatedAt: "2026-11-20T10:00:00Z"},
		{SessionID: "b2", Cwd: "/src/other"},
		{SessionID: "a3", Cwd: "/src/app"},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := acp.Prober{}.ListSessions(ctx, agenttest.Spec("fake", s), "/src/app")
	if err != nil {
		t.Fatalf("ListSessions: %v", err)
	}
	want := []backends.AgentSession{{ID: "a1", Cwd: "/src/app", Title: "fix the parser", UpdatedAt: "2026-11-20T10:00:00Z"}, {ID: "a3", Cwd: "/src/app"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("ListSessions = %+v; want %+v", got, want)
	}
	if c := calls(t, log); strings.Join(c, " ") != "session/list" {
		t.Errorf("the agent got %q; want only session/list", c)
	}
	_, err = acp.Prober{}.ListSessions(ctx, agenttest.Spec("fake", agenttest.Script{}), "/src/app")
	if !errors.Is(err, backends.ErrUnsupported) {
		t.Errorf("ListSessions of an agent without session/list = %v; want ErrUnsupported", err)
	}
}

// TestCancelRequestOnlyToAgentsThatTakeIt: a request the daemon abandons
// (its context ends before the agent answers) is followed by
// $/cancel_request, except to an agent whose compat says it does not take
// it.
func TestCancelRequestOnlyToAgentsThatTakeIt(t *testing.T) {
	for _, drop := range []bool{false, true} {
		log := filepath.Join(t.TempDir(), "calls")
		s := agenttest.Script{Unanswered: []string{"session/set_mode"}, CallLog: log}
		h := newBackend(t, s, acp.Config{Spec: backends.Spec{Compat: backends.Compat{NoCancelRequest: drop}}})
		h.start(t, "")
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		if err := h.b.SetMode(ctx, "plan"); err == nil {
			t.Fatal("SetMode of an agent that never answers succeeded")
		}
		cancel()
		// The SDK sends the notification from a goroutine of its own; a
		// prompt after it is written after it.
		if _, err := h.prompt(t, "x"); err != nil {
			t.Fatal(err)
		}
		got := strings.Join(calls(t, log), " ")
		for deadline := time.Now().Add(5 * time.Second); !drop && !strings.Contains(got, "$/cancel_request") && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			got = strings.Join(calls(t, log), " ")
		}
		if sent := strings.Contains(got, "$/cancel_request"); sent == drop {
			t.Errorf("NoCancelRequest %v: the agent got %q", drop, got)
		}
	}
}

// TestMessageIDsKept: the message id of each chunk and the id the agent
// gives the prompt's message are kept.
func TestMessageIDsKept(t *testing.T) {
	s := agenttest.Script{Turns: []agenttest.Turn{{UserMessageID: "u-1", Steps: []agenttest.Step{
		{Update: []byte(`{"sessionUpdate":"agent_message_chunk","messageId":"m-1","content":{"type":"text","text":"one"}}`)},
		{Update: []byte(`{"sessionUpdate":"agent_message_chunk","messageId":"m-2","content":{"type":"text","text":"two"}}`)},
		{Chunk: "no id"},
	}}}}
	h := newBackend(t, s, acp.Config{})
	h.start(t, "")
	res, err := h.prompt(t, "x")
	if err != nil {
		t.Fatal(err)
	}
	if res.UserMessageID != "u-1" {
		t.Errorf("TurnResult.UserMessageID = %q; want u-1", res.UserMessageID)
	}
	var ids []string
	for _, ev := range h.turn.all() {
		var c backends.ChunkData
		if ev.Type == backends.EventMessageChunk && json.Unmarshal(ev.Data, &c) == nil {
			ids = append(ids, c.Text+"="+c.MessageID)
		}
	}
	if got := strings.Join(ids, " "); got != "one=m-1 two=m-2 no id=" {
		t.Errorf("chunks = %q; want their message ids", got)
	}
}
