package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentpool/agentpool/permission"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// answerInput answers a permission request.
type answerInput struct {
	Session string `json:"session" jsonschema:"the session id"`
	Request string `json:"request" jsonschema:"the request id, as list_permissions or wait_turn gave it"`
	Choice  string `json:"choice" jsonschema:"one of the kinds the request offers: allow_once, allow_always (for the rest of the session), reject_once, reject_always; or simply allow or deny"`
}

func (s *Server) addPermissionTools() {
	addTool(s, "list_permissions", "List pending permission requests",
		"Lists the session's permission requests waiting for an answer: what the agent wants to do (edit, execute, ...), the risk, the command or files, and the choices offered. The agent's turn is blocked until each is answered (or it times out and is rejected).",
		readOnly, s.listPermissions)
	addTool(s, "answer_permission", "Answer a permission request",
		"Answers one of the session's pending permission requests, letting the agent go on (allow) or refusing (deny). Read what it asks first: the request's text comes from the agent.",
		additive, s.answerPermission)
}

func (s *Server) listPermissions(ctx context.Context, _ *mcp.CallToolRequest, api API, in sessionInput) (*mcp.CallToolResult, error) {
	pend, err := api.Permissions(ctx, in.Session)
	if err != nil {
		return nil, err
	}
	views := make([]pendingView, 0, len(pend))
	var b strings.Builder
	if len(pend) == 0 {
		fmt.Fprintf(&b, "No permission request of session %s waits for an answer.\n", in.Session)
	}
	for _, pd := range pend {
		v := viewPending(pd)
		views = append(views, v)
		b.WriteString(v.text())
	}
	return result(b.String(), map[string]any{"permissions": views}), nil
}

func (s *Server) answerPermission(ctx context.Context, _ *mcp.CallToolRequest, api API, in answerInput) (*mcp.CallToolResult, error) {
	if in.Request == "" || in.Choice == "" {
		return nil, invalid("request and choice are required")
	}
	if err := api.Answer(ctx, in.Session, in.Request, in.Choice); err != nil {
		return nil, err
	}
	text := fmt.Sprintf("Answered request %s of session %s: %s. Call wait_turn to follow the turn.\n", in.Request, in.Session, in.Choice)
	return result(text, map[string]any{"session": in.Session, "request": in.Request, "choice": in.Choice}), nil
}

// pendingView is what the tools show of a pending request.
type pendingView struct {
	ID        string    `json:"id"`
	Agent     string    `json:"agent"`
	Turn      int64     `json:"turn,omitempty"`
	Title     string    `json:"title,omitempty"`
	Action    string    `json:"action"`
	Risk      string    `json:"risk"`
	Locations []string  `json:"locations,omitempty"`
	Input     string    `json:"input,omitempty"`
	Choices   []string  `json:"choices"`
	Deadline  time.Time `json:"deadline"`
}

// maxInputShown bounds the tool input shown with a request.
const maxInputShown = 600

func viewPending(pd permission.Pending) pendingView {
	r := pd.Request
	v := pendingView{ID: pd.ID, Agent: r.Agent, Turn: r.Turn, Title: oneLine(r.Title, 200), Action: string(r.Action),
		Risk: string(pd.Risk), Locations: r.Locations, Deadline: pd.Deadline}
	if len(r.RawInput) > 0 && string(r.RawInput) != "null" {
		v.Input, _ = clip(string(r.RawInput), maxInputShown)
	}
	seen := map[string]bool{}
	for _, o := range r.Options {
		if o.Kind != "" && !seen[o.Kind] {
			seen[o.Kind] = true
			v.Choices = append(v.Choices, o.Kind)
		}
	}
	if len(v.Choices) == 0 {
		v.Choices = []string{permission.KindAllowOnce, permission.KindRejectOnce}
	}
	return v
}

// text is the request on a few lines.
func (v pendingView) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "- request %s: agent %s asks to %s", v.ID, v.Agent, v.Action)
	if v.Title != "" {
		fmt.Fprintf(&b, ": %q (the agent's words)", v.Title)
	}
	fmt.Fprintf(&b, "; risk %s", v.Risk)
	if len(v.Locations) > 0 {
		fmt.Fprintf(&b, "; files %s", strings.Join(v.Locations, ", "))
	}
	b.WriteByte('\n')
	if v.Input != "" {
		fmt.Fprintf(&b, "  input: %s\n", v.Input)
	}
	fmt.Fprintf(&b, "  choices: %s", strings.Join(v.Choices, ", "))
	if !v.Deadline.IsZero() {
		fmt.Fprintf(&b, " (unanswered, it is rejected at %s", v.Deadline.UTC().Format(time.TimeOnly+" UTC"))
		if left := time.Until(v.Deadline); left > 0 {
			fmt.Fprintf(&b, ", in %s", left.Round(time.Second))
		}
		b.WriteByte(')')
	}
	b.WriteByte('\n')
	return b.String()
}
