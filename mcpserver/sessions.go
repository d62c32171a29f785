package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"

	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Inputs of the session tools.
type (
	noInput      struct{}
	sessionInput struct {
		Session string `json:"session" jsonschema:"the session id (as create_session or list_sessions gave it)"`
	}
	listSessionsInput struct {
		Repo string `json:"repo,omitempty" jsonschema:"only sessions of this repository (a path)"`
		All  bool   `json:"all,omitempty" jsonschema:"include closed sessions (default: open ones only)"`
	}
	createInput struct {
		Agent string `json:"agent" jsonschema:"the provider id of the agent to run (see list_providers), e.g. claude or codex"`
		Repo  string `json:"repo,omitempty" jsonschema:"path of the git repository to work on; default: the directory this server was started in"`
		Base  string `json:"base,omitempty" jsonschema:"branch, tag or commit the session's branch starts from; default: the repository's HEAD"`
		Title string `json:"title,omitempty" jsonschema:"a short title for the session"`
		// Prompt and WaitSeconds start the first turn at once, as prompt.
		Prompt      string `json:"prompt,omitempty" jsonschema:"start the first turn with this prompt at once, as the prompt tool does"`
		WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"with prompt: also wait up to this many seconds (at most 50) for the turn, as wait_turn does"`
	}
	closeInput struct {
		Session string `json:"session" jsonschema:"the session id"`
		Discard bool   `json:"discard,omitempty" jsonschema:"throw the session's work away and delete its branch; default false: uncommitted work is committed to the session's branch, which is kept"`
	}
	mergeInput struct {
		Session string `json:"session" jsonschema:"the session id"`
		Into    string `json:"into,omitempty" jsonschema:"local branch to merge into; default: the branch the session started from"`
		Squash  bool   `json:"squash,omitempty" jsonschema:"make one commit summarising the session instead of a merge"`
		Rebase  bool   `json:"rebase,omitempty" jsonschema:"instead of merging, bring the session's branch up to date with the other branch"`
	}
	diffInput struct {
		Session  string `json:"session" jsonschema:"the session id"`
		Turn     int64  `json:"turn,omitempty" jsonschema:"only what this turn changed; default 0: everything the session changed since it started"`
		StatOnly bool   `json:"stat_only,omitempty" jsonschema:"list the changed files without the patch"`
	}
)

func (s *Server) addSessionTools() {
	addTool(s, "list_providers", "List agent providers",
		"Lists the coding agents (providers) this agentpool can run, with whether each is ready to use. Use a provider id whose status is ready as `agent` in create_session or prompt.",
		readOnly, s.listProviders)
	addTool(s, "list_sessions", "List sessions",
		"Lists agentpool sessions: id, repository, agent, state (busy with a turn or idle), branch. Open sessions only unless all is true.",
		readOnly, s.listSessions)
	addTool(s, "get_session", "Show a session",
		"Shows one session: repository, branch, worktree path, agents and their state, the current or last turn, and whether a turn runs now.",
		readOnly, s.getSession)
	addTool(s, "create_session", "Create a session",
		"Creates a session: a new git worktree and branch of the repository, with a coding agent started in it, ready for prompt. Returns the session id. With prompt, it also starts the first turn (and with wait_seconds waits for it, as wait_turn). The agent works only inside that worktree; nothing in the repository's checkout changes until merge_session.",
		additive, s.createSession)
	addTool(s, "close_session", "Close a session",
		"Closes a session: stops its agents and removes its worktree. Its work is committed to the session's branch, which is kept (merge it later with merge_session), unless discard is true.",
		destructive, s.closeSession)
	addTool(s, "merge_session", "Merge a session's work",
		"Merges the session's branch (its uncommitted work committed first) into the branch it started from, or into `into`, in the main repository. Refused, changing nothing, when it would conflict or while a turn runs; the message says which paths.",
		destructive, s.mergeSession)
	addTool(s, "get_diff", "Show a session's changes",
		"Shows what the session changed since it started (or what one turn changed): a diff stat per file and the unified patch, cut when very long.",
		readOnly, s.getDiff)
}

func (s *Server) listProviders(ctx context.Context, _ *mcp.CallToolRequest, api API, _ noInput) (*mcp.CallToolResult, error) {
	snap, err := api.Providers(ctx)
	if err != nil {
		return nil, err
	}
	type provider struct {
		ID         string `json:"id"`
		Label      string `json:"label"`
		Kind       string `json:"kind"`
		Status     string `json:"status"`
		Diagnostic string `json:"diagnostic,omitempty"`
		// NetworkRefused are the connections its agents were last refused.
		NetworkRefused []registry.NetworkRefusal `json:"network_refused,omitempty"`
	}
	var out []provider
	var b strings.Builder
	ready := 0
	for _, p := range snap.Providers {
		out = append(out, provider{p.ID, p.Label, string(p.Kind), p.Status, p.Diagnostic, p.NetworkRefused})
		if p.Status == registry.StatusReady {
			ready++
		}
	}
	fmt.Fprintf(&b, "%s, %d ready:\n", plural(len(out), "provider"), ready)
	for _, p := range out {
		fmt.Fprintf(&b, "- %s (%s, %s): %s", p.ID, p.Label, p.Kind, p.Status)
		if p.Diagnostic != "" {
			fmt.Fprintf(&b, " — %s", oneLine(p.Diagnostic, 200))
		}
		b.WriteByte('\n')
		for _, r := range p.NetworkRefused {
			fmt.Fprintf(&b, "  network refused %s:%d (%s)", r.Host, r.Port, oneLine(r.Reason, 120))
			if r.Allow != "" {
				fmt.Fprintf(&b, "; the entry %q in its sandbox.network would allow it", r.Allow)
			}
			b.WriteByte('\n')
		}
	}
	if snap.Diagnostic != "" {
		fmt.Fprintf(&b, "The providers file was rejected (the last good one is in force): %s\n", oneLine(snap.Diagnostic, 300))
	}
	return result(b.String(), map[string]any{"providers": out}), nil
}

func (s *Server) listSessions(ctx context.Context, _ *mcp.CallToolRequest, api API, in listSessionsInput) (*mcp.CallToolResult, error) {
	list, err := api.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	repo := ""
	if in.Repo != "" {
		repo = filepath.Clean(s.absPath(in.Repo))
	}
	var out []sessionView
	for _, ss := range list {
		if (!in.All && ss.Status != pool.StatusOpen) || (repo != "" && filepath.Clean(ss.Repo) != repo) {
			continue
		}
		out = append(out, viewOf(ss))
	}
	var b strings.Builder
	if len(out) == 0 {
		b.WriteString("No sessions.\n")
	}
	for _, v := range out {
		b.WriteString("- " + v.line() + "\n")
	}
	return result(b.String(), map[string]any{"sessions": out}), nil
}

func (s *Server) getSession(ctx context.Context, _ *mcp.CallToolRequest, api API, in sessionInput) (*mcp.CallToolResult, error) {
	ss, err := api.Session(ctx, in.Session)
	if err != nil {
		return nil, err
	}
	v := viewOf(ss)
	var b strings.Builder
	b.WriteString(v.line() + "\n")
	if ss.Status == pool.StatusClosed {
		v.Work = closedWork(ctx, api, ss)
		b.WriteString(v.Work.text(v.Branch))
	} else {
		fmt.Fprintf(&b, "worktree: %s\n", v.Worktree)
	}
	for _, a := range ss.Agents {
		fmt.Fprintf(&b, "agent %s: %s", a.Agent, a.State)
		if a.Error != "" {
			fmt.Fprintf(&b, " (%s)", oneLine(a.Error, 200))
		}
		b.WriteByte('\n')
	}
	switch {
	case v.Busy && v.Turn > 0:
		fmt.Fprintf(&b, "turn %d is running: wait_turn waits for it\n", v.Turn)
	case v.LastTurn > 0:
		fmt.Fprintf(&b, "turn %d was the last one\n", v.LastTurn)
	}
	return result(b.String(), v), nil
}

func (s *Server) createSession(ctx context.Context, req *mcp.CallToolRequest, api API, in createInput) (*mcp.CallToolResult, error) {
	if strings.TrimSpace(in.Agent) == "" {
		return nil, invalid("agent is required: a provider id from list_providers")
	}
	repo := in.Repo
	if repo == "" {
		repo = s.cfg.WorkDir
	}
	if repo == "" {
		return nil, invalid("repo is required: the path of a git repository")
	}
	creq := pool.CreateRequest{Repo: s.absPath(repo), BaseRef: in.Base, Agent: in.Agent, Title: in.Title}
	if strings.TrimSpace(in.Prompt) == "" {
		ss, err := api.CreateSession(ctx, creq)
		if err != nil {
			return nil, err
		}
		v := viewOf(ss)
		return result(createdText(v)+fmt.Sprintf("Next: prompt with session %q.\n", v.ID), v), nil
	}
	// One request: the session and its first turn (a spare's agent
	// answers about as soon as a warm one).
	cs, err := api.CreateSessionPrompt(ctx, creq, in.Prompt)
	if err != nil {
		return nil, err
	}
	v := viewOf(cs.Session)
	text := createdText(v)
	if cs.FirstTurnError != nil || cs.FirstTurn == nil {
		// The session exists: say so with the refusal of the prompt.
		msg := "the daemon did not start it"
		if cs.FirstTurnError != nil {
			msg = errorText(cs.FirstTurnError)
		}
		return nil, fmt.Errorf("%s but its first prompt failed: %s", strings.TrimSuffix(text, ".\n"), msg)
	}
	turn, structured, err := s.started(ctx, req, api, cs.ID, 0, *cs.FirstTurn, in.WaitSeconds)
	if err != nil {
		return nil, err
	}
	return result(text+turn, createdView{sessionView: v, FirstTurn: structured}), nil
}

// createdText says which session was created, and where.
func createdText(v sessionView) string {
	return fmt.Sprintf("Created session %s: agent %s on branch %s of %s (worktree %s).\n", v.ID, v.Agent, v.Branch, v.Repo, v.Worktree)
}

// createdView is a created session with its first turn.
type createdView struct {
	sessionView
	FirstTurn any `json:"first_turn"`
}

func (s *Server) closeSession(ctx context.Context, _ *mcp.CallToolRequest, api API, in closeInput) (*mcp.CallToolResult, error) {
	res, err := api.CloseSession(ctx, in.Session, in.Discard)
	if err != nil {
		return nil, err
	}
	w := res.Worktree
	var text string
	switch {
	case w.Discarded:
		text = fmt.Sprintf("Closed session %s; its work was discarded.\n", in.Session)
	case w.BranchDeleted:
		text = fmt.Sprintf("Closed session %s; it had no work, so its branch was deleted.\n", in.Session)
	default:
		text = fmt.Sprintf("Closed session %s; its work is on branch %s", in.Session, w.Branch)
		if w.Committed {
			text += fmt.Sprintf(" (uncommitted changes committed as %s)", short(w.Commit))
		}
		text += ": merge_session can still merge it.\n"
	}
	return result(text, res), nil
}

func (s *Server) mergeSession(ctx context.Context, _ *mcp.CallToolRequest, api API, in mergeInput) (*mcp.CallToolResult, error) {
	res, err := api.MergeSession(ctx, in.Session, pool.MergeRequest{Into: in.Into, Squash: in.Squash, Rebase: in.Rebase})
	if err != nil {
		return nil, err
	}
	return result(mergeText(res), res), nil
}

// mergeText says what a merge did.
func mergeText(res pool.MergeResult) string {
	var b strings.Builder
	switch {
	case res.Method == "up-to-date":
		fmt.Fprintf(&b, "Nothing to merge: %s is already in %s.\n", res.Branch, res.Into)
	case res.Rebase:
		fmt.Fprintf(&b, "Brought %s up to date with %s (%s).\n", res.Branch, res.Into, res.Method)
	default:
		fmt.Fprintf(&b, "Merged %s into %s (%s): %s moved from %s to %s.\n", res.Branch, res.Into, res.Method, res.Updated, short(res.Before), short(res.Head))
	}
	if res.Committed {
		fmt.Fprintf(&b, "The session's uncommitted work was committed first as %s.\n", short(res.WorkCommit))
	}
	for _, c := range res.Commits {
		fmt.Fprintf(&b, "- %s %s\n", short(c.ID), oneLine(c.Subject, 120))
	}
	if res.MoreCommits > 0 {
		fmt.Fprintf(&b, "- and %d more commits\n", res.MoreCommits)
	}
	if res.WorkingTree != "" {
		fmt.Fprintf(&b, "The files of the checkout %s were updated.\n", res.WorkingTree)
	}
	return b.String()
}

func (s *Server) getDiff(ctx context.Context, _ *mcp.CallToolRequest, api API, in diffInput) (*mcp.CallToolResult, error) {
	d, err := api.Diff(ctx, in.Session, in.Turn)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	what := "the session"
	if in.Turn > 0 {
		what = fmt.Sprintf("turn %d", in.Turn)
	}
	if len(d.Files) == 0 {
		fmt.Fprintf(&b, "No changes in %s.\n", what)
	} else {
		fmt.Fprintf(&b, "%s changed %s (+%d −%d):\n", upperFirst(what), plural(d.Stat.Files, "file"), d.Stat.Additions, d.Stat.Deletions)
		b.WriteString(fileList(d.Files))
	}
	if d.HiddenCount > 0 {
		fmt.Fprintf(&b, "%s hidden by ignore rules the session changed (not in the diff).\n", plural(d.HiddenCount, "path"))
	}
	if !in.StatOnly && d.Patch != "" {
		patch, cut := clip(d.Patch, s.cfg.MaxText)
		b.WriteString("\n" + patch)
		if !strings.HasSuffix(patch, "\n") {
			b.WriteByte('\n')
		}
		if cut || d.Truncated {
			b.WriteString("[patch cut: ask for one turn, or read the files in the worktree]\n")
		}
	}
	d.Patch = ""
	return result(b.String(), d), nil
}

// fileList lists changed files, one a line.
func fileList(files []pool.FileChange) string {
	var b strings.Builder
	for _, f := range files {
		name := f.Path
		if f.OldPath != "" {
			name = f.OldPath + " → " + f.Path
		}
		if f.Binary {
			fmt.Fprintf(&b, "  %s %s (binary)\n", f.Status, name)
		} else {
			fmt.Fprintf(&b, "  %s %s +%d −%d\n", f.Status, name, f.Additions, f.Deletions)
		}
	}
	return b.String()
}

// sessionView is what the tools show of a session.
type sessionView struct {
	ID       string `json:"id"`
	Title    string `json:"title,omitempty"`
	Repo     string `json:"repo"`
	Agent    string `json:"agent"`
	Status   string `json:"status"`
	Busy     bool   `json:"busy"`
	Turn     int64  `json:"turn,omitempty"`
	LastTurn int64  `json:"last_turn,omitempty"`
	Branch   string `json:"branch"`
	// Worktree is the path of an open session's worktree ("" once the
	// session is closed: its worktree was removed).
	Worktree        string `json:"worktree,omitempty"`
	WorktreeRemoved bool   `json:"worktree_removed,omitempty"`
	// Work says where a closed session's work went (get_session only).
	Work *closedView `json:"work,omitempty"`
}

func viewOf(ss pool.Session) sessionView {
	v := sessionView{ID: ss.ID, Title: ss.Title, Repo: ss.Repo, Agent: ss.ActiveAgent, Status: ss.Status, Busy: ss.Busy,
		Turn: ss.Turn, LastTurn: ss.LastTurn, Branch: ss.Worktree.Branch, Worktree: ss.Worktree.Path}
	if ss.Status == pool.StatusClosed {
		v.Worktree, v.WorktreeRemoved = "", true
	}
	return v
}

// closedView is what closing a session did with its work, as its
// session.closed event says.
type closedView struct {
	// Known is false when the event could not be read: the branch is
	// then named without saying whether it still exists.
	Known         bool   `json:"known"`
	Discarded     bool   `json:"discarded,omitempty"`
	BranchDeleted bool   `json:"branch_deleted,omitempty"`
	Commit        string `json:"commit,omitempty"`
}

// closedWork reads what closing ss did with its work from its last events.
func closedWork(ctx context.Context, api API, ss pool.Session) *closedView {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := &closedView{}
	from := max(ss.LastSeq-8, 0) // session.closed is the last event, or nearly
	_ = api.Events(ctx, ss.ID, from, func(ev backends.Event) error {
		if ev.Type != backends.EventSessionClosed {
			return nil
		}
		var d struct {
			Worktree pool.RemoveResult `json:"worktree"`
		}
		if json.Unmarshal(ev.Data, &d) == nil {
			out.Known, out.Discarded, out.BranchDeleted, out.Commit = true, d.Worktree.Discarded, d.Worktree.BranchDeleted, d.Worktree.Commit
		}
		return httpapi.ErrStop
	})
	return out
}

// text says where the work of a closed session on branch went.
func (c *closedView) text(branch string) string {
	switch {
	case !c.Known:
		return fmt.Sprintf("worktree: removed when the session closed; its work was on branch %s (kept unless the close discarded it)\n", branch)
	case c.Discarded:
		return fmt.Sprintf("worktree: removed when the session closed; its work was discarded and branch %s deleted\n", branch)
	case c.BranchDeleted:
		return fmt.Sprintf("worktree: removed when the session closed; it left no work, so branch %s was deleted\n", branch)
	}
	return fmt.Sprintf("worktree: removed when the session closed; its work is on branch %s: merge_session can still merge it\n", branch)
}

// line is the view on one line.
func (v sessionView) line() string {
	state := v.Status
	if v.Status == pool.StatusOpen {
		state = "idle"
		if v.Busy {
			state = fmt.Sprintf("running turn %d", v.Turn)
		}
	}
	l := fmt.Sprintf("%s: agent %s, %s, repo %s, branch %s", v.ID, v.Agent, state, v.Repo, v.Branch)
	if v.Title != "" {
		l += fmt.Sprintf(" — %q", v.Title)
	}
	return l
}

// absPath resolves a relative path against the server's directory.
func (s *Server) absPath(p string) string {
	if filepath.IsAbs(p) || s.cfg.WorkDir == "" {
		return p
	}
	return filepath.Join(s.cfg.WorkDir, p)
}

// short shortens a commit id.
func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// upperFirst capitalises an ASCII first letter.
func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
