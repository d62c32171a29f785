package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
	"github.com/agentpool/agentpool/worktree"
)

const sessionUsage = `  new [--repo DIR] [--agent ID] [--title T]   open a session in its own git worktree; its agent starts now
  list [--all]                                list the open sessions (--all: closed ones too)
  list --from-agent ID [--repo DIR]           list an agent's own sessions of the repository
  show SESSION                                show a session, its agents and turns
  close SESSION [--discard]                   close a session; its work is committed to its branch
  fork SESSION [--agent ID] [--turn N]        a new session from its state now (uncommitted work too) or after turn N, with its history
  merge SESSION [--into B] [--squash|--rebase] merge its branch into its base (or B), or --rebase onto it
  review SESSION PATH:LINE TEXT...            send comments on lines of its diff to its agent as the next prompt
  push SESSION [--remote origin]              push its branch with your own git (commits its work first)
  pr SESSION [--base B] [--title T] [--draft] push, then open a pull request with gh (or print the forge's page)
  setup SESSION                               run the repository's trusted setup in it now (see trust)
  move SESSION HOST                           hand an idle session, with its work, to another host of the pool
  budget SESSION [--tokens N] [--cost X --currency USD] [--clear]  set the session's budget (or show its usage)
`

// defaultAgent is the agent of a new session unless --agent says
// otherwise: "" lets the daemon choose (the providers file's
// "default_agent", else demo).
const defaultAgent = ""

func (c *cli) session(ctx context.Context, args []string) error {
	sub, args, err := c.subcommand("session", sessionUsage+configUsage, args)
	if err != nil {
		return err
	}
	switch sub {
	case "new", "create":
		return c.sessionNew(ctx, args)
	case "list", "ls":
		return c.sessionList(ctx, args)
	case "show":
		return c.sessionShow(ctx, args)
	case "close", "rm":
		return c.sessionClose(ctx, args)
	case "merge":
		return c.sessionMerge(ctx, args) // cli_merge.go
	case "setup":
		return c.sessionSetup(ctx, args) // cli_trust.go
	case "budget":
		return c.sessionBudget(ctx, args) // cli_usage.go
	case "review":
		return c.sessionReview(ctx, args) // cli_review.go
	case "push":
		return c.sessionPush(ctx, args) // cli_push.go
	case "pr":
		return c.sessionPR(ctx, args) // cli_push.go
	case "config":
		return c.sessionConfig(ctx, args) // cli_config.go
	case "mode":
		return c.sessionMode(ctx, args)
	case "commands":
		return c.sessionCommands(ctx, args)
	case "move":
		return c.sessionMove(ctx, args)
	case "fork":
		return c.sessionFork(ctx, args) // cli_fork.go
	}
	return fmt.Errorf("session: unknown command %q (want new, list, show, close, fork, merge, review, push, pr, setup, move, budget, config, mode or commands)", sub)
}

// gitTopLevel returns the top directory of the git repository holding dir.
func gitTopLevel(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--show-toplevel")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" && !strings.Contains(msg, "not a git repository") {
			// Another refusal, such as a repository another user owns.
			return "", fmt.Errorf("git cannot use %s: %s (%w)", dir, strings.TrimPrefix(strings.SplitN(msg, "\n", 2)[0], "fatal: "), err)
		}
		return "", fmt.Errorf("%s is not inside a git repository (git init, or pick a repository with --repo DIR)", dir)
	}
	return strings.TrimSpace(string(out)), nil
}

func (c *cli) sessionNew(ctx context.Context, args []string) error {
	fs := c.flagSet("session new", "session new [--repo DIR|URL] [--agent ID] [--title TEXT] [--base REF] [--id ID] [--agent-session ID] [--no-warm] [--host HOST]\n            [--budget-tokens N] [--budget-cost X [--budget-currency USD]]\n            [--mcp NAME=COMMAND [ARGS...]]... [--mcp-json FILE] [--prompt TEXT] [--json]\n\nOpens a session: a git worktree of the repository on a branch of its own,\nwhere the session's agents work. The agent starts in the background right\naway, so that the first prompt finds it ready (--no-warm: at the first prompt).\n--prompt starts the first turn in the same request and streams it, as prompt\ndoes (with a spare ready, the agent answers about as soon as a warm one).\n--agent-session takes up one of the agent's own sessions (see session list\n--from-agent) in the new worktree, and says whether the agent did.\n\nThe session's ACP agents get its MCP servers besides their provider's (a\nsession's server replaces the provider's of its name). --mcp adds a stdio\nserver; --mcp-json reads an object of servers keyed by name, as \"mcp_servers\"\nin providers.json (\"-\": stdin), which may hold env and headers: keep secrets\nthere, never on a command line.\n\nWhen several hosts share the pool, the session runs on --host, else on the\nlive host with the most room that has the agent; give its repository by URL\nso that it can move between hosts.")
	repo := fs.String("repo", "", "the git repository, or its URL (default: the one holding the current directory)")
	agent := fs.String("agent", defaultAgent, "the session's first agent (a provider id; default: providers.json's \"default_agent\", else demo)")
	title := fs.String("title", "", "a title for the session")
	base := fs.String("base", "", "the commit-ish the worktree starts from (default HEAD)")
	id := fs.String("id", "", "the session id (default: a random one)")
	noWarm := fs.Bool("no-warm", false, "do not start the agent until the first prompt")
	agentSession := fs.String("agent-session", "", "one of the agent's own sessions for this one to take up")
	asJSON := fs.Bool("json", false, "print the session as JSON")
	first := fs.String("prompt", "", "start the first turn with `TEXT` and stream it")
	bf := addBudgetFlags(fs, "budget-") // cli_usage.go
	var mcp mcpFlag
	fs.Var(&mcp, "mcp", "an MCP server `NAME=COMMAND [ARGS...]` (stdio) for the session's agents; repeatable")
	mcpJSON := fs.String("mcp-json", "", "a JSON `FILE` of MCP servers keyed by name (\"-\": stdin)")
	onHost := fs.String("host", "", "with several hosts: the `HOST` to run the session on (see hosts)")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	servers, err := c.mcpServersOf(*mcpJSON, mcp.servers) // cli_mcp.go
	if err != nil {
		return err
	}
	warm := !*noWarm
	dir, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	if worktree.IsURL(*repo) {
		dir = *repo // a repository given by URL: the daemon mirrors it
	}
	if *repo == "" {
		// The daemon checks a given path; the default is this repository.
		if dir, err = gitTopLevel(ctx, dir); err != nil {
			return err
		}
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	if *agent == "" {
		*agent = c.daemonDefaultAgent(ctx, api)
	}
	status, err := c.checkAgent(ctx, api, *agent)
	if err != nil {
		return err
	}
	// An agent the daemon saw not installed is refused before the
	// worktree is made; the daemon looks it up again, so that one just
	// installed works, and only then is there a worktree to report on.
	notInstalled := status == registry.StatusNotInstalled
	if !notInstalled {
		c.progress("creating the session's worktree of %s… ", dir)
	}
	start := time.Now()
	var budget *backends.Budget
	if b := bf.budget(); !b.IsZero() {
		budget = &b
	}
	created, err := api.Create(ctx, httpapi.CreateSessionRequest{CreateRequest: pool.CreateRequest{ID: *id, Repo: dir, Agent: *agent, Title: *title, BaseRef: *base, Warm: &warm,
		AgentSession: *agentSession, MCPServers: servers, Budget: budget}, Prompt: *first, Host: *onHost})
	s := created.Session
	if err != nil {
		if isNotInstalled(err) {
			if !notInstalled {
				c.progress("not created\n")
			}
			return c.agentNotInstalled(*agent, err)
		}
		if !notInstalled {
			c.progress("failed\n")
		}
		return err
	}
	if !notInstalled {
		c.progress("done (%.1fs)\n", time.Since(start).Seconds())
	}
	if *asJSON && *first == "" {
		return c.printJSON(s)
	}
	if *asJSON {
		if err := c.printJSON(created); err != nil {
			return err
		}
		return c.followFirstTurn(ctx, api, created, true)
	}
	fmt.Fprintf(c.stdout, "session %s created\n", s.ID)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  repo\t%s\n  worktree\t%s\n  branch\t%s\n  agent\t%s\n", s.Repo, s.Worktree.Path, s.Worktree.Branch, s.ActiveAgent)
	if h := orStr(created.Host, s.Host); h != "" {
		fmt.Fprintf(tw, "  host\t%s\n", h)
	}
	if len(s.MCPServers) > 0 {
		fmt.Fprintf(tw, "  mcp servers\t%s\n", strings.Join(s.MCPServers.Names(), ", "))
	}
	_ = tw.Flush()
	if *agentSession != "" {
		c.reportTakeUp(ctx, api, s, *agentSession, warm) // cli_agentsessions.go
	}
	c.noteUncommitted(ctx, api, c.stdout, s.Repo, *base, s.Worktree.BaseCommit) // cli_dirty.go
	c.noteSetup(ctx, api, c.stdout, s.Repo, s.ID)                               // cli_trust.go
	if *first != "" {
		fmt.Fprintln(c.stdout)
		return c.followFirstTurn(ctx, api, created, false)
	}
	fmt.Fprintf(c.stdout, "\nNext: %s prompt %s \"describe what you want\"\n", c.self(), s.ID)
	return nil
}

// followFirstTurn streams the first turn of a session created with
// --prompt, or says why it did not start.
func (c *cli) followFirstTurn(ctx context.Context, api *httpapi.Client, created httpapi.CreatedSession, asJSON bool) error {
	if created.FirstTurnError != nil || created.FirstTurn == nil {
		msg := "the daemon did not start it"
		if created.FirstTurnError != nil {
			msg = created.FirstTurnError.Message
		}
		return fmt.Errorf("session %s was created, but its first turn did not start: %s", created.ID, msg)
	}
	t := *created.FirstTurn
	if t.QueuePosition > 0 {
		c.progress("every agent slot is busy: turn %d waits at position %d in the queue\n", t.ID, t.QueuePosition)
	}
	return c.followTurn(ctx, api, created.ID, 0, t, asJSON)
}

func (c *cli) sessionList(ctx context.Context, args []string) error {
	fs := c.flagSet("session list", "session list [--all] [--json]\nsession list --from-agent ID [--repo DIR] [--json]\n\nLists the open sessions, or with --all the closed ones too (prune forgets\nthose closed long ago). With --from-agent, lists that agent's own sessions\nof the repository (default: the one holding the current directory), which\nsession new --agent-session takes up.")
	all := fs.Bool("all", false, "list the closed sessions too")
	asJSON := fs.Bool("json", false, "print the sessions as JSON")
	fromAgent := fs.String("from-agent", "", "list this agent's own sessions instead")
	repo := fs.String("repo", "", "with --from-agent: the repository (default: the one holding the current directory)")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *fromAgent != "" {
		return c.agentSessionList(ctx, *fromAgent, *repo, *asJSON) // cli_agentsessions.go
	}
	if *repo != "" {
		return fmt.Errorf("session list: --repo goes with --from-agent")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	every, err := api.Sessions(ctx)
	if err != nil {
		return err
	}
	list := make([]pool.Session, 0, len(every))
	for _, s := range every {
		if *all || s.Status != pool.StatusClosed {
			list = append(list, s)
		}
	}
	hidden := len(every) - len(list)
	if *asJSON {
		return c.printJSON(list)
	}
	if len(list) == 0 {
		if hidden > 0 {
			fmt.Fprintf(c.stdout, "no open sessions (%d closed: %s session list --all); open one with: %s session new\n",
				hidden, c.self(), c.self())
			return nil
		}
		fmt.Fprintf(c.stdout, "no sessions; open one with: %s session new\n", c.self())
		return nil
	}
	defer func() {
		if hidden > 0 {
			fmt.Fprintf(c.stdout, "(%d closed %s not shown: %s session list --all; %s prune forgets old ones)\n",
				hidden, pluralOf(hidden, "session", "sessions"), c.self(), c.self())
		}
	}()
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	// The host column when several hosts share the pool.
	withHost := slices.ContainsFunc(list, func(s pool.Session) bool { return s.Host != "" })
	if withHost {
		fmt.Fprintln(tw, "ID\tSTATUS\tHOST\tAGENT\tBUSY\tCREATED\tREPO\tTITLE")
	} else {
		fmt.Fprintln(tw, "ID\tSTATUS\tAGENT\tBUSY\tCREATED\tREPO\tTITLE")
	}
	for _, s := range list {
		status := string(s.Status)
		if withHost {
			status += "\t" + orStr(s.Host, "-")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, status, s.ActiveAgent, yesNo(s.Busy),
			s.CreatedAt.Local().Format(time.DateTime), termLine(s.Repo), oneLine(s.Title, 80))
	}
	return tw.Flush()
}

func (c *cli) sessionShow(ctx context.Context, args []string) error {
	fs := c.flagSet("session show", "session show SESSION [--json]\n\nShows a session, its warm agents and its turns.")
	asJSON := fs.Bool("json", false, "print the session and its turns as JSON")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	s, err := api.Session(ctx, pos[0])
	if err != nil {
		return err
	}
	turns, err := api.Turns(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(struct {
			pool.Session
			Turns []pool.Turn `json:"turns"`
		}{s, turns})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "session\t%s\nstatus\t%s\nrepo\t%s\nworktree\t%s\nbranch\t%s\nbase\t%s\nagent\t%s\n",
		s.ID, s.Status, s.Repo, s.Worktree.Path, s.Worktree.Branch, s.Worktree.BaseCommit, s.ActiveAgent)
	if s.Host != "" {
		fmt.Fprintf(tw, "host\t%s\n", s.Host)
	}
	if s.Title != "" {
		fmt.Fprintf(tw, "title\t%s\n", oneLine(s.Title, 200))
	}
	if s.Busy {
		fmt.Fprintf(tw, "running\tturn %d\n", s.Turn)
	}
	if s.PRURL != "" {
		fmt.Fprintf(tw, "pull request\t%s\n", s.PRURL)
	}
	_ = tw.Flush()
	if len(s.Agents) > 0 {
		fmt.Fprintln(c.stdout, "\nagents:")
		c.renderBackends(s.Agents)
	}
	c.renderMCP(s) // cli_mcp.go
	if s.Usage != nil && (s.Usage.Turns > 0 || len(s.Usage.Cost) > 0 || s.Usage.Budget != nil || len(s.Usage.Agents) > 0) {
		fmt.Fprintln(c.stdout, "\nusage:")
		c.renderSessionUsage(c.stdout, *s.Usage) // cli_usage.go
	}
	if len(turns) > 0 {
		fmt.Fprintln(c.stdout, "\nturns:")
		tw = tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TURN\tAGENT\tSTARTED\tSTOP\tTOKENS\tPROMPT")
		for _, t := range turns {
			stop := t.StopReason
			if t.EndedAt == nil {
				stop = "running"
			}
			tokens := "-"
			if t.Usage != nil {
				tokens = strconv.FormatInt(t.Usage.Total, 10)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Agent, t.StartedAt.Local().Format(time.DateTime), stop, tokens, oneLine(t.Prompt, 60))
		}
		_ = tw.Flush()
		c.renderReviews(turns) // cli_review.go
	}
	return nil
}

func (c *cli) sessionClose(ctx context.Context, args []string) error {
	fs := c.flagSet("session close", "session close SESSION [--discard] [--json]\n\nCloses a session: stops its agents and removes its worktree. Uncommitted work\nis committed to the session's branch first, unless --discard.")
	discard := fs.Bool("discard", false, "throw the uncommitted work away instead of committing it")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	c.progress("closing %s (stopping agents, removing the worktree)… ", pos[0])
	res, err := api.CloseSession(ctx, pos[0], *discard)
	if err != nil {
		c.progress("failed\n")
		return err
	}
	c.progress("done\n")
	if *asJSON {
		return c.printJSON(res)
	}
	w := res.Worktree
	switch {
	case w.PushError != "":
		where := "this host's copy of the repository"
		if w.Host != "" {
			where = "the copy of the repository on host " + w.Host
		}
		fmt.Fprintf(c.stdout, "session %s closed; its work is committed on branch %s (%s) in %s only: the push to the shared repository failed: %s\n",
			res.Session, w.Branch, short(w.Commit), where, w.PushError)
	case w.Remote != "" && (w.Committed || w.Commit != ""):
		fmt.Fprintf(c.stdout, "session %s closed; its work is committed on branch %s (%s), pushed to %s\n", res.Session, w.Branch, short(w.Commit), w.Remote)
	case w.Remote != "":
		fmt.Fprintf(c.stdout, "session %s closed; nothing uncommitted, its work is on branch %s, pushed to %s\n", res.Session, w.Branch, w.Remote)
	case w.BranchDeleted:
		fmt.Fprintf(c.stdout, "session %s closed; it left no work, so its branch %s was deleted\n", res.Session, w.Branch)
	case w.Discarded:
		fmt.Fprintf(c.stdout, "session %s closed; its work was discarded and branch %s deleted\n", res.Session, w.Branch)
	case w.Committed:
		fmt.Fprintf(c.stdout, "session %s closed; its work is committed on branch %s (%s)\n", res.Session, w.Branch, short(w.Commit))
	case w.Missing:
		fmt.Fprintf(c.stdout, "session %s closed; its worktree was already gone (branch %s)\n", res.Session, w.Branch)
	default:
		fmt.Fprintf(c.stdout, "session %s closed; nothing uncommitted, its work is on branch %s\n", res.Session, w.Branch)
	}
	return nil
}

func (c *cli) sessionMove(ctx context.Context, args []string) error {
	fs := c.flagSet("session move", "session move SESSION HOST [--json]\n\nHands a session to another host of the pool (see hosts): its agents stop,\nits work is checkpointed and pushed to its repository, and HOST continues it\nfrom there, starting its agent on the next prompt. The session must be idle\n(wait for its turn, or cancel it) and its repository given by URL.")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := c.parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	c.progress("moving %s to %s (stopping its agent, pushing its work)… ", pos[0], pos[1])
	res, err := api.MoveSession(ctx, pos[0], pos[1])
	if err != nil {
		c.progress("failed\n")
		return err
	}
	c.progress("done\n")
	if *asJSON {
		return c.printJSON(res)
	}
	if res.Already {
		fmt.Fprintf(c.stdout, "session %s is on %s; its agent starts there on the next prompt\n", res.Session, res.To)
		return nil
	}
	fmt.Fprintf(c.stdout, "session %s moved from %s to %s; its agent starts there on the next prompt\n", res.Session, res.From, res.To)
	return nil
}

// short abbreviates a commit id.
func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// oneLine flattens s to one line of at most n runes, its control
// characters escaped (termText).
func oneLine(s string, n int) string {
	s = termText(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// orStr is s, or def when s is empty.
func orStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
