package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentpool/agentpool/pool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Inputs of the turn tools.
type (
	promptInput struct {
		Session     string `json:"session" jsonschema:"the session id"`
		Text        string `json:"text" jsonschema:"the prompt: the task for the agent, with everything it needs to know (it does not see your conversation)"`
		Agent       string `json:"agent,omitempty" jsonschema:"prompt another provider's agent in the same worktree (it becomes the session's active agent); default: the session's active agent"`
		WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"also wait up to this many seconds (at most 50) for the turn to end, as wait_turn does; default 0: return at once"`
	}
	waitInput struct {
		Session        string `json:"session" jsonschema:"the session id"`
		Turn           int64  `json:"turn,omitempty" jsonschema:"the turn number prompt returned; default: the session's running or last turn"`
		TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"wait at most this many seconds (default and maximum 50)"`
	}
)

func (s *Server) addTurnTools() {
	addTool(s, "prompt", "Prompt a session's agent",
		"Sends a prompt to the session's coding agent and starts a turn. It returns at once with the turn number (turns run for minutes): then call wait_turn until the turn has ended. One turn runs at a time per session; a prompt while one runs is refused.",
		additive, s.prompt)
	addTool(s, "wait_turn", "Wait for a turn",
		"Waits up to 50 seconds for a turn to end, sending progress notifications (tool calls, text) meanwhile. "+
			"When it has ended: the agent's final text, the stop reason and the files changed. "+
			"When it still runs after the wait: state \"running\": call wait_turn again. "+
			"When the agent waits for a permission: state \"waiting_for_permission\" with the requests: answer them with answer_permission, then call wait_turn again.",
		readOnly, s.waitTurn)
	addTool(s, "cancel_turn", "Cancel a running turn",
		"Cancels the session's running turn; it returns once the turn has ended. The work done so far stays in the worktree.",
		destructive, s.cancelTurn)
}

func (s *Server) prompt(ctx context.Context, req *mcp.CallToolRequest, api API, in promptInput) (*mcp.CallToolResult, error) {
	if strings.TrimSpace(in.Text) == "" {
		return nil, invalid("text is required")
	}
	ss, err := api.Session(ctx, in.Session)
	if err != nil {
		return nil, err
	}
	text, structured, err := s.startTurn(ctx, req, api, in.Session, ss.LastSeq, in.Agent, in.Text, in.WaitSeconds)
	if err != nil {
		return nil, err
	}
	return result(text, structured), nil
}

// startTurn prompts agent of session (whose last event is seq last) with
// text and, with waitSeconds, waits for the turn; it returns the result's
// text and structured content.
func (s *Server) startTurn(ctx context.Context, req *mcp.CallToolRequest, api API, session string, last int64, agent, prompt string, waitSeconds int) (string, any, error) {
	t, err := api.Prompt(ctx, session, agent, prompt, false)
	if err != nil {
		return "", nil, err
	}
	return s.started(ctx, req, api, session, last, t, waitSeconds)
}

// started reports turn t, just started, and with waitSeconds waits for it
// as wait_turn does; last is the session's last seq before it started.
func (s *Server) started(ctx context.Context, req *mcp.CallToolRequest, api API, session string, last int64, t pool.Turn, waitSeconds int) (string, any, error) {
	s.rememberStart(session, t.ID, last)
	text := fmt.Sprintf("Started turn %d of session %s (agent %s).", t.ID, session, t.Agent)
	if t.QueuePosition > 0 {
		text += fmt.Sprintf(" Every agent slot is busy: it waits at position %d of the queue.", t.QueuePosition)
	}
	if waitSeconds <= 0 {
		text += fmt.Sprintf("\nNext: wait_turn with session %q and turn %d.\n", session, t.ID)
		return text, map[string]any{"session": session, "turn": t.ID, "agent": t.Agent, "state": stateRunning}, nil
	}
	rep, err := s.wait(ctx, req, api, session, t.ID, s.waitFor(waitSeconds))
	if err != nil {
		return "", nil, err
	}
	return text + "\n" + rep.text(), rep, nil
}

func (s *Server) waitTurn(ctx context.Context, req *mcp.CallToolRequest, api API, in waitInput) (*mcp.CallToolResult, error) {
	turn := in.Turn
	if turn < 0 {
		return nil, invalid("turn must be a turn number (1 for the first)")
	}
	if turn == 0 {
		ss, err := api.Session(ctx, in.Session)
		if err != nil {
			return nil, err
		}
		// The running turn, else the last one (which ended, maybe before
		// this server started).
		turn = max(ss.Turn, ss.LastTurn)
		if turn == 0 {
			return nil, invalid("session %s has had no turn yet: start one with prompt", in.Session)
		}
	}
	rep, err := s.wait(ctx, req, api, in.Session, turn, s.waitFor(in.TimeoutSeconds))
	if err != nil {
		return nil, err
	}
	return result(rep.text(), rep), nil
}

func (s *Server) cancelTurn(ctx context.Context, _ *mcp.CallToolRequest, api API, in sessionInput) (*mcp.CallToolResult, error) {
	if err := api.Cancel(ctx, in.Session); err != nil {
		return nil, err
	}
	return result(fmt.Sprintf("Cancelled the running turn of session %s.\n", in.Session), nil), nil
}

// waitFor is the wait a tool asked for in seconds, capped at MaxWait; 0
// or less means MaxWait.
func (s *Server) waitFor(seconds int) time.Duration {
	d := time.Duration(seconds) * time.Second
	if d <= 0 || d > s.cfg.MaxWait {
		return s.cfg.MaxWait
	}
	return d
}
