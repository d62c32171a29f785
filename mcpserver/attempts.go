package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Attempt set states (POST /v1/attempts).
const (
	attemptsRunning = "running"
	attemptsDone    = "done"
	attemptsPicked  = "picked"
)

// attemptSet is the daemon's answer about a set of attempts.
type attemptSet struct {
	ID         string            `json:"id"`
	Title      string            `json:"title,omitempty"`
	Prompt     string            `json:"prompt"`
	Repo       string            `json:"repo"`
	BaseCommit string            `json:"base_commit"`
	Check      string            `json:"check,omitempty"`
	State      string            `json:"state"`
	Picked     string            `json:"picked,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	Attempts   []attempt         `json:"attempts"`
	Merge      *pool.MergeResult `json:"merge,omitempty"`
}

// attempt is one session of a set.
type attempt struct {
	Session      string          `json:"session"`
	Agent        string          `json:"agent"`
	Turn         int64           `json:"turn"`
	State        string          `json:"state"`
	StopReason   string          `json:"stop_reason,omitempty"`
	DurationMS   int64           `json:"duration_ms,omitempty"`
	Usage        json.RawMessage `json:"usage,omitempty"`
	FilesChanged int             `json:"files_changed"`
	LinesAdded   int             `json:"lines_added"`
	LinesRemoved int             `json:"lines_removed"`
	Check        *checkResult    `json:"check,omitempty"`
	Error        string          `json:"error,omitempty"`
	// Pending is what the daemon answers; Permissions what the tools
	// show of it.
	Pending     []permission.Pending `json:"pending_permissions,omitempty"`
	Permissions []pendingView        `json:"permissions,omitempty"`
}

// viewPermissions turns the pending requests the daemon listed for each
// attempt into what the tools show of them.
func (set *attemptSet) viewPermissions() {
	for i := range set.Attempts {
		a := &set.Attempts[i]
		for _, pd := range a.Pending {
			a.Permissions = append(a.Permissions, viewPending(pd))
		}
		a.Pending = nil
	}
}

// asks says whether an attempt waits for a permission answer.
func (set attemptSet) asks() bool {
	for _, a := range set.Attempts {
		if len(a.Permissions) > 0 {
			return true
		}
	}
	return false
}

// checkResult is how an attempt's check command ran.
type checkResult struct {
	State    string `json:"state"`
	ExitCode int    `json:"exit_code"`
	Output   string `json:"output,omitempty"`
}

// Inputs of the attempts tools.
type (
	startAttemptsInput struct {
		Prompt string   `json:"prompt" jsonschema:"the task, the same for every attempt"`
		Repo   string   `json:"repo,omitempty" jsonschema:"path of the git repository; default: the directory this server was started in"`
		Base   string   `json:"base,omitempty" jsonschema:"branch or commit every attempt starts from; default: the repository's HEAD"`
		Agents []string `json:"agents,omitempty" jsonschema:"one attempt per provider id listed, e.g. [\"claude\",\"codex\"]"`
		Agent  string   `json:"agent,omitempty" jsonschema:"instead of agents: one provider id, run n times"`
		N      int      `json:"n,omitempty" jsonschema:"with agent: how many attempts"`
		Check  string   `json:"check,omitempty" jsonschema:"a shell command run in each worktree once its turn ended, e.g. go test ./...; its exit status tells which attempts pass"`
		Title  string   `json:"title,omitempty" jsonschema:"a short title"`
	}
	getAttemptsInput struct {
		ID          string `json:"id" jsonschema:"the attempt set id (att-...)"`
		WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds (at most 50) for every attempt to be done; default 0: answer at once"`
	}
	pickInput struct {
		ID      string `json:"id" jsonschema:"the attempt set id"`
		Session string `json:"session" jsonschema:"the session of the attempt to keep"`
		Discard bool   `json:"discard,omitempty" jsonschema:"delete the other attempts' branches; default false: they are closed and their branches kept"`
		Squash  *bool  `json:"squash,omitempty" jsonschema:"merge as one squashed commit (default: the daemon's choice)"`
		Message string `json:"message,omitempty" jsonschema:"the commit message of the merge"`
	}
)

func (s *Server) addAttemptTools() {
	addTool(s, "start_attempts", "Start several attempts at a task",
		"Runs the same prompt in several sessions side by side (one per agent listed, or n tries of one agent), each on its own branch from the same base, optionally followed by a check command (tests). Returns the attempt set id at once: follow it with get_attempts, keep the best with pick_attempt.",
		additive, s.startAttempts)
	addTool(s, "get_attempts", "Show a set of attempts",
		"Shows a set of attempts: per attempt its session, agent, state, stop reason, files and lines changed, and check result. With wait_seconds it waits (at most 50 s) until all are done; call again while it says running. Read an attempt's work with get_diff on its session.",
		readOnly, s.getAttempts)
	addTool(s, "list_attempts", "List sets of attempts",
		"Lists the sets of attempts with their state.",
		readOnly, s.listAttempts)
	addTool(s, "pick_attempt", "Keep one attempt",
		"Merges the chosen attempt's session into the base branch (like merge_session) and closes the other attempts, keeping their branches unless discard is true.",
		destructive, s.pickAttempt)
}

func (s *Server) startAttempts(ctx context.Context, _ *mcp.CallToolRequest, api API, in startAttemptsInput) (*mcp.CallToolResult, error) {
	if strings.TrimSpace(in.Prompt) == "" {
		return nil, invalid("prompt is required")
	}
	if len(in.Agents) == 0 && in.Agent == "" {
		return nil, invalid("give agents (a list of provider ids) or agent with n")
	}
	repo := in.Repo
	if repo == "" {
		repo = s.cfg.WorkDir
	}
	body := map[string]any{"prompt": in.Prompt, "repo": s.absPath(repo)}
	for k, v := range map[string]string{"base": in.Base, "agent": in.Agent, "check": in.Check, "title": in.Title} {
		if v != "" {
			body[k] = v
		}
	}
	if len(in.Agents) > 0 {
		body["agents"] = in.Agents
	}
	if in.N > 0 {
		body["n"] = in.N
	}
	var set attemptSet
	if err := api.Call(ctx, http.MethodPost, "/v1/attempts", body, &set); err != nil {
		return nil, err
	}
	set.viewPermissions()
	text := set.text() + fmt.Sprintf("Next: get_attempts with id %q and wait_seconds 50 (it returns early when an attempt asks for a permission, which you answer with answer_permission).\n", set.ID)
	return result(text, set), nil
}

func (s *Server) getAttempts(ctx context.Context, req *mcp.CallToolRequest, api API, in getAttemptsInput) (*mcp.CallToolResult, error) {
	path := "/v1/attempts/" + url.PathEscape(in.ID)
	if in.WaitSeconds > 0 {
		wait := s.waitFor(in.WaitSeconds)
		path += fmt.Sprintf("?wait=%d", int(wait/time.Second))
		p := newProgress(ctx, req, s.logger)
		started := time.Now()
		stop := p.heartbeat(s.cfg.Heartbeat, func() string {
			return fmt.Sprintf("attempts %s still running (waited %s)", in.ID, time.Since(started).Round(time.Second))
		})
		defer stop()
	}
	var set attemptSet
	if err := api.Call(ctx, http.MethodGet, path, nil, &set); err != nil {
		return nil, err
	}
	set.viewPermissions()
	text := set.text()
	switch {
	case set.asks():
		text += fmt.Sprintf("Those attempts are blocked until you answer: answer_permission with the attempt's session, the request id and a choice for each request (unanswered, it is rejected at its deadline); then call get_attempts again with id %q.\n", set.ID)
	case set.State == attemptsRunning:
		text += fmt.Sprintf("Still running: call get_attempts again with id %q and wait_seconds 50.\n", set.ID)
	case set.State == attemptsDone:
		text += fmt.Sprintf("All done: read each with get_diff (session), then pick_attempt with id %q and the session to keep.\n", set.ID)
	}
	return result(text, set), nil
}

func (s *Server) listAttempts(ctx context.Context, _ *mcp.CallToolRequest, api API, _ noInput) (*mcp.CallToolResult, error) {
	var raw json.RawMessage
	if err := api.Call(ctx, http.MethodGet, "/v1/attempts", nil, &raw); err != nil {
		return nil, err
	}
	var sets []attemptSet
	if err := json.Unmarshal(raw, &sets); err != nil {
		var wrapped struct {
			Attempts []attemptSet `json:"attempts"`
		}
		if err := json.Unmarshal(raw, &wrapped); err != nil {
			return nil, fmt.Errorf("read the list of attempts: %w", err)
		}
		sets = wrapped.Attempts
	}
	var b strings.Builder
	if len(sets) == 0 {
		b.WriteString("No attempts.\n")
	}
	for _, set := range sets {
		fmt.Fprintf(&b, "- %s: %s, %s, %s", set.ID, set.State, plural(len(set.Attempts), "attempt"), oneLine(set.Prompt, 80))
		if set.Picked != "" {
			fmt.Fprintf(&b, " (picked %s)", set.Picked)
		}
		b.WriteByte('\n')
	}
	return result(b.String(), map[string]any{"attempts": sets}), nil
}

func (s *Server) pickAttempt(ctx context.Context, _ *mcp.CallToolRequest, api API, in pickInput) (*mcp.CallToolResult, error) {
	body := map[string]any{"session": in.Session, "discard": in.Discard}
	if in.Squash != nil {
		body["squash"] = *in.Squash
	}
	if in.Message != "" {
		body["message"] = in.Message
	}
	var set attemptSet
	if err := api.Call(ctx, http.MethodPost, "/v1/attempts/"+url.PathEscape(in.ID)+"/pick", body, &set); err != nil {
		return nil, err
	}
	text := set.text()
	if set.Merge != nil {
		text += mergeText(*set.Merge)
	}
	return result(text, set), nil
}

// text is the set for a model to read.
func (set attemptSet) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Attempts %s (%s): %s of %q in %s", set.ID, set.State, plural(len(set.Attempts), "attempt"), oneLine(set.Prompt, 100), set.Repo)
	if set.BaseCommit != "" {
		fmt.Fprintf(&b, " from %s", short(set.BaseCommit))
	}
	if set.Check != "" {
		fmt.Fprintf(&b, ", check %q", set.Check)
	}
	b.WriteString(".\n")
	if set.State == attemptsPicked && set.Picked != "" {
		fmt.Fprintf(&b, "Picked: %s.\n", set.Picked)
	}
	for _, a := range set.Attempts {
		fmt.Fprintf(&b, "- session %s, agent %s: %s", a.Session, a.Agent, a.State)
		if a.StopReason != "" {
			fmt.Fprintf(&b, " (%s)", a.StopReason)
		}
		if a.DurationMS > 0 {
			fmt.Fprintf(&b, ", %s", (time.Duration(a.DurationMS) * time.Millisecond).Round(time.Second))
		}
		fmt.Fprintf(&b, ", %s changed +%d −%d", plural(a.FilesChanged, "file"), a.LinesAdded, a.LinesRemoved)
		if a.Check != nil && a.Check.State != "" && a.Check.State != "none" {
			fmt.Fprintf(&b, ", check %s", a.Check.State)
			if a.Check.State == "failed" {
				fmt.Fprintf(&b, " (exit %d)", a.Check.ExitCode)
			}
		}
		if a.Error != "" {
			fmt.Fprintf(&b, ", error: %s", oneLine(a.Error, 200))
		}
		b.WriteByte('\n')
		if n := len(a.Permissions); n > 0 {
			fmt.Fprintf(&b, "  waits for an answer to %s (answer_permission with session %q):\n", plural(n, "permission request"), a.Session)
			for _, p := range a.Permissions {
				b.WriteString(indent(p.text(), "  "))
			}
		}
		if a.Check != nil && a.Check.State == "failed" && a.Check.Output != "" {
			out, _ := tail(a.Check.Output, 800)
			fmt.Fprintf(&b, "  check output (end): %s\n", strings.ReplaceAll(strings.TrimSpace(out), "\n", "\n  "))
		}
	}
	return b.String()
}

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}
