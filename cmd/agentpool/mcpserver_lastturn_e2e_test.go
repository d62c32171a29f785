package main

import (
	"strings"
	"testing"
)

// TestMCPServerWaitLastTurn follows a session's turn with wait_turn
// without a turn number, as the tool promises: the running turn, else
// the last one, also once it has ended and from a new MCP server; its
// final text keeps the agent's messages apart; get_session refuses an
// empty session naming the field, and shows a closed session's worktree
// as removed, with the branch that holds its work.
func TestMCPServerWaitLastTurn(t *testing.T) {
	bin, home, repo, d, c := startMCPRig(t)

	_, sc := c.call("create_session", map[string]any{"agent": "scripted"}, nil, false)
	id, _ := sc["id"].(string)
	if text, _ := c.call("wait_turn", map[string]any{"session": id}, nil, true); !strings.Contains(text, "has had no turn yet") {
		t.Errorf("wait_turn before any turn = %q; want that the session has had no turn", text)
	}
	c.call("prompt", map[string]any{"session": id, "text": "hello"}, nil, false)
	text, sc := c.call("wait_turn", map[string]any{"session": id}, nil, false)
	perms, _ := sc["permissions"].([]any)
	if sc["state"] != "waiting_for_permission" || len(perms) != 1 {
		t.Fatalf("wait_turn = %q, %v; want the permission request", text, sc)
	}
	req, _ := perms[0].(map[string]any)["id"].(string)
	c.call("answer_permission", map[string]any{"session": id, "request": req, "choice": "allow_once"}, nil, false)
	// Wait for the end through the session's events, so that the next
	// wait_turn comes after it, as when a caller comes back later.
	waitFor(t, "the end of turn 1", func() bool {
		s, err := d.client.Session(t.Context(), id)
		return err == nil && !s.Busy
	})
	for _, who := range []*mcpClient{c, startMCP(t, bin, home, repo)} {
		text, sc = who.call("wait_turn", map[string]any{"session": id}, nil, false)
		if sc["state"] != "ended" || sc["turn"] != float64(1) {
			t.Fatalf("wait_turn {session} after the turn ended = %q, %v; want turn 1 ended", text, sc)
		}
		if !strings.Contains(text, "permission: allow_once\nDone: wrote notes.txt.") {
			t.Errorf("wait_turn final text = %q; want the agent's messages on their own lines", text)
		}
	}

	text, _ = c.call("get_session", map[string]any{"session": ""}, nil, true)
	if !strings.Contains(text, "invalid arguments: session is required") || strings.Contains(text, "endpoint") {
		t.Errorf("get_session with an empty session = %q; want an invalid-argument error naming session", text)
	}

	_, sc = c.call("get_session", map[string]any{"session": id}, nil, false)
	worktree, _ := sc["worktree"].(string)
	branch, _ := sc["branch"].(string)
	if worktree == "" || branch == "" {
		t.Fatalf("get_session of an open session = %v; want its worktree and branch", sc)
	}
	c.call("close_session", map[string]any{"session": id}, nil, false)
	text, sc = c.call("get_session", map[string]any{"session": id}, nil, false)
	if strings.Contains(text, worktree) || sc["worktree"] != nil || sc["worktree_removed"] != true {
		t.Errorf("get_session of a closed session = %q, %v; want no worktree path (it was removed)", text, sc)
	}
	if want := "worktree: removed when the session closed; its work is on branch " + branch; !strings.Contains(text, want) {
		t.Errorf("get_session of a closed session = %q; want %q", text, want)
	}
}
