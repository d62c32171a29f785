package mcpserver

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// forkInput is the input of fork_session.
type forkInput struct {
	Session string `json:"session" jsonschema:"the session to fork"`
	Agent   string `json:"agent,omitempty" jsonschema:"the fork's agent (a provider id); default: the session's"`
	Turn    int64  `json:"turn,omitempty" jsonschema:"fork at the end of this turn (its files and the history up to it); default 0: the session as it is now, uncommitted changes included"`
	Title   string `json:"title,omitempty" jsonschema:"the fork's title; default: fork of the session's"`
}

func (s *Server) addForkTool() {
	addTool(s, "fork_session", "Fork a session",
		"Creates a new session from another: its own worktree and branch, starting with the session's files as they are now (uncommitted changes included) or as turn `turn` left them, and with the session's history (prompts, answers, turns) as its past, so its agent knows the story. The session forked is not touched, even while its turn runs. Returns the new session id, ready for prompt.",
		additive, s.forkSession)
}

func (s *Server) forkSession(ctx context.Context, _ *mcp.CallToolRequest, api API, in forkInput) (*mcp.CallToolResult, error) {
	if in.Session == "" {
		return nil, invalid("session is required: the id of the session to fork")
	}
	if in.Turn < 0 {
		return nil, invalid("turn is a turn number of the session (1 for its first), or 0 for its state now")
	}
	var ss pool.Session
	err := api.Call(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(in.Session)+"/fork",
		httpapi.ForkRequest{Agent: in.Agent, Turn: in.Turn, Title: in.Title}, &ss)
	if err != nil {
		return nil, err
	}
	v := viewOf(ss)
	at := "as it is now"
	if in.Turn > 0 {
		at = fmt.Sprintf("at the end of turn %d", in.Turn)
	}
	text := fmt.Sprintf("Forked session %s %s into session %s: agent %s on branch %s (worktree %s), with %d turn%s of history.\nNext: prompt with session %q.\n",
		in.Session, at, v.ID, v.Agent, v.Branch, v.Worktree, ss.LastTurn, map[bool]string{true: "", false: "s"}[ss.LastTurn == 1], v.ID)
	return result(text, v), nil
}
