package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// TestEndToEndForkNativeSessionFork forks a session whose agent offers
// ACP session/fork: the fork's agent starts in its own process, in the
// fork's worktree, and forks the session's agent session there; its
// first turn carries no briefing (its conversation holds the story) and
// the user's words alone. An agent that refuses session/fork, and a fork
// at an earlier turn, start a new session and get the briefing instead.
func TestEndToEndForkNativeSessionFork(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	logs := t.TempDir()
	turn := []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "done."}}}}
	script := func(name string, fails bool) agenttest.Script {
		return agenttest.Script{AgentName: name, ForkSession: true, ForkFails: fails, Turns: turn,
			PromptLog: filepath.Join(logs, name+".prompts"), CallLog: filepath.Join(logs, name+".calls")}
	}
	writeScripted(t, home, bin, map[string]any{"natty": script("natty", false), "refuser": script("refuser", true)})
	for _, id := range []string{"natty", "refuser"} {
		setProviderField(t, home, id, "sandbox", map[string]any{"write": []string{logs}})
	}
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"a.txt": "a\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()

	for _, c := range []struct {
		agent  string
		native bool
	}{{"natty", true}, {"refuser", false}} {
		src := d.newSessionWith(repo, c.agent)
		for _, p := range []string{"first task", "second task"} {
			if _, err := d.client.Prompt(ctx, src, "", p, true); err != nil {
				t.Fatal(err)
			}
		}
		srcAgent := agentSessionOf(t, d, src)
		f, err := d.client.Fork(ctx, src, httpapi.ForkRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ready := d.waitEventAfter(f.ID, pool.EventSessionForked, backends.EventAgentReady)
		forked := strings.Contains(string(ready.Data), `"resumed_by":"fork"`)
		if forked != c.native {
			t.Errorf("%s: the fork's agent.ready = %s; want forked by the agent: %v", c.agent, ready.Data, c.native)
		}
		calls, err := os.ReadFile(filepath.Join(logs, c.agent+".calls"))
		if err != nil {
			t.Error(err)
		}
		if want := "session/fork " + srcAgent; !strings.Contains(string(calls), want) {
			t.Errorf("%s: the agent's calls:\n%s\nwant %q (asked to fork the session's agent session)", c.agent, calls, want)
		}
		tr, err := d.client.Prompt(ctx, f.ID, "", "third task, in the fork", true)
		if err != nil || tr.StopReason != "end_turn" {
			t.Fatalf("%s: fork's prompt = %+v, %v", c.agent, tr, err)
		}
		briefed := false
		for _, ev := range eventsOf(t, d.client, f.ID) {
			briefed = briefed || ev.Type == pool.EventTurnBriefing && ev.Turn == tr.ID
		}
		prompts := readPrompts(t, filepath.Join(logs, c.agent+".prompts"))
		last := prompts[len(prompts)-1]
		if c.native {
			if briefed || len(last) != 1 || last[0].Text != "third task, in the fork" {
				t.Errorf("%s: forked by the agent, the fork's first prompt = %+v (briefing event: %v); want the user's words alone", c.agent, last, briefed)
			}
		} else if !briefed || len(last) < 2 || !strings.Contains(last[0].Text+resourceText(last[0]), "first task") {
			t.Errorf("%s: refused session/fork, the fork's first prompt = %+v (briefing event: %v); want the briefing", c.agent, last, briefed)
		}
	}

	// A fork at an earlier turn: the agent's conversation holds more, so
	// no session/fork; the briefing tells turn 1's story.
	src := d.newSessionWith(repo, "natty")
	for _, p := range []string{"one", "two"} {
		if _, err := d.client.Prompt(ctx, src, "", p, true); err != nil {
			t.Fatal(err)
		}
	}
	f, err := d.client.Fork(ctx, src, httpapi.ForkRequest{Turn: 1})
	if err != nil {
		t.Fatal(err)
	}
	ready := d.waitEventAfter(f.ID, pool.EventSessionForked, backends.EventAgentReady)
	if strings.Contains(string(ready.Data), `"resumed_by":"fork"`) {
		t.Errorf("fork at turn 1 forked the agent's conversation (which holds turn 2): %s", ready.Data)
	}
}

// waitEventAfter waits for an event of type typ after session's first
// event of type after (a fork's own, after its copied history).
func (d *daemon) waitEventAfter(session string, after, typ backends.EventType) backends.Event {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		seen := false
		for _, ev := range eventsOf(d.t, d.client, session) {
			seen = seen || ev.Type == after
			if seen && ev.Type == typ {
				return ev
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.t.Fatalf("no %s after %s in %s", typ, after, session)
	return backends.Event{}
}

// agentSessionOf returns the agent session id of session's agent.ready.
func agentSessionOf(t *testing.T, d *daemon, session string) string {
	t.Helper()
	for _, ev := range eventsOf(t, d.client, session) {
		if ev.Type == backends.EventAgentReady {
			var r struct {
				ID string `json:"agent_session_id"`
			}
			_ = json.Unmarshal(ev.Data, &r)
			if r.ID != "" {
				return r.ID
			}
		}
	}
	t.Fatalf("no agent session id in %s's events", session)
	return ""
}

func resourceText(b agenttest.PromptBlock) string {
	if b.Resource == nil {
		return ""
	}
	return b.Resource.Text
}
