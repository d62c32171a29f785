package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
)

func (c *cli) events(ctx context.Context, args []string) error {
	fs := c.flagSet("events", "events SESSION [--follow] [--after SEQ] [--json]\n\nPrints a session's events, one per line: the stored ones, and with --follow\nthe live ones too (resuming without loss if the stream drops). Under a\npermission request that waits for an answer, it prints the command that\nanswers it.")
	followFlag := fs.Bool("follow", false, "keep printing live events until interrupted or the session closes")
	fs.BoolVar(followFlag, "f", false, "short for --follow")
	after := fs.Int64("after", 0, "print only the events after this seq")
	asJSON := fs.Bool("json", false, "print the events as JSON lines")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	waiting := c.waitingRequests(ctx, api, pos[0], *followFlag)
	show := func(ev backends.Event) error {
		if *asJSON {
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(c.stdout, "%s\n", b)
			return err
		}
		if _, err := fmt.Fprintln(c.stdout, eventLine(ev)); err != nil {
			return err
		}
		if ev.Type == backends.EventPermissionRequest {
			if d := decodeData(ev); waiting(ctx, ev, d.Request) {
				_, err := fmt.Fprintf(c.stdout, "      waiting for an answer: %s permissions answer %s %s %s\n", c.self(), pos[0], d.Request, strings.Join(offeredKinds(d), "|"))
				return err
			}
		}
		return nil
	}
	if !*followFlag {
		evs, err := api.EventLog(ctx, pos[0], *after)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if err := show(ev); err != nil {
				return err
			}
		}
		return nil
	}
	err = api.Events(ctx, pos[0], *after, show)
	if ctx.Err() != nil {
		return nil // interrupted: the normal end of --follow
	}
	return err
}

// waitingRequests returns a function that says whether a permission
// request of session, named by a permission.requested event events
// prints, still waits for an answer, so that events says how to answer it
// as prompt does. The requests waiting when events starts are read once;
// with follow, a request asked since (by its event's time) is looked up
// when its event comes. A failed read says none waits: events still
// prints the events.
func (c *cli) waitingRequests(ctx context.Context, api *httpapi.Client, session string, follow bool) func(context.Context, backends.Event, string) bool {
	start := time.Now()
	pending := func(ctx context.Context) map[string]bool {
		ps, err := api.Permissions(ctx, session)
		if err != nil {
			return nil
		}
		ids := make(map[string]bool, len(ps))
		for _, p := range ps {
			ids[p.ID] = true
		}
		return ids
	}
	atStart := pending(ctx)
	return func(ctx context.Context, ev backends.Event, id string) bool {
		if id == "" {
			return false
		}
		if atStart[id] {
			return true
		}
		// A request asked before events started and not waiting then
		// has been answered; one asked since may wait (a second of
		// leeway for the daemon's clock).
		if !follow || ev.Time.Before(start.Add(-time.Second)) {
			return false
		}
		return pending(ctx)[id]
	}
}

func (c *cli) diff(ctx context.Context, args []string) error {
	fs := c.flagSet("diff", "diff SESSION [--turn N] [--stat] [--json]\n\nShows what the session changed in its worktree since it began, or what one\nturn changed.")
	turn := fs.Int64("turn", 0, "show only this turn's changes")
	stat := fs.Bool("stat", false, "show the changed files only")
	asJSON := fs.Bool("json", false, "print the diff as JSON")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	d, err := api.Diff(ctx, pos[0], *turn)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(d)
	}
	defer c.renderHidden(d)
	defer c.renderCopied(d)
	if len(d.Files) == 0 {
		fmt.Fprintln(c.stdout, "no changes")
		return nil
	}
	if *stat {
		c.renderDiffStat(d)
		return nil
	}
	for _, line := range strings.SplitAfter(d.Patch, "\n") {
		colour := ""
		switch {
		case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
		case strings.HasPrefix(line, "+"):
			colour = ansiGreen
		case strings.HasPrefix(line, "-"):
			colour = ansiRed
		case strings.HasPrefix(line, "@@"):
			colour = ansiCyan
		}
		if c.outTTY {
			// On a terminal, the repository's bytes are shown escaped
			// (a patch file written to elsewhere keeps them).
			line = termText(line)
		}
		if c.outTTY && colour != "" {
			line = colour + strings.TrimSuffix(line, "\n") + ansiReset + "\n"
		}
		fmt.Fprint(c.stdout, line)
	}
	if d.Truncated {
		fmt.Fprintln(c.stdout, "(diff truncated)")
	}
	return nil
}

// renderHidden says on stderr (stdout may be a patch file) which untracked
// paths ignore rules the session changed keep out of the diff.
func (c *cli) renderHidden(d pool.Diff) {
	if d.HiddenCount == 0 {
		return
	}
	fmt.Fprintf(c.stderr, "note: %d untracked path%s hidden from this diff by ignore rules the session added or changed:\n", d.HiddenCount, plural(d.HiddenCount))
	for _, h := range d.Hidden {
		fmt.Fprintf(c.stderr, "  %s  (%s)\n", termLine(h.Path), termLine(h.Rule))
	}
	if n := d.HiddenCount - len(d.Hidden); n > 0 {
		fmt.Fprintf(c.stderr, "  … and %d more\n", n)
	}
}

// renderCopied says on stderr which files the setup copied into the
// worktree: they are never committed, so the diff shows none of them.
func (c *cli) renderCopied(d pool.Diff) {
	var present []string
	for _, f := range d.Copied {
		if f.Present {
			present = append(present, f.Path)
		}
	}
	if len(present) == 0 {
		return
	}
	fmt.Fprintf(c.stderr, "note: %d file%s copied by the setup (not part of the session's work, never committed):\n", len(present), plural(len(present)))
	for _, p := range present {
		fmt.Fprintf(c.stderr, "  %s  (copied)\n", termLine(p))
	}
}

// renderDiffStat prints the files of a diff and the totals.
func (c *cli) renderDiffStat(d pool.Diff) {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	for _, f := range d.Files {
		path := f.Path
		if f.OldPath != "" && f.OldPath != f.Path {
			path = f.OldPath + " → " + f.Path
		}
		change := fmt.Sprintf("+%d -%d", f.Additions, f.Deletions)
		if f.Binary {
			change = "binary"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Status, termLine(path), change)
	}
	_ = tw.Flush()
	fmt.Fprintf(c.stdout, "%d file%s changed, +%d -%d\n", d.Stat.Files, plural(d.Stat.Files), d.Stat.Additions, d.Stat.Deletions)
}

func (c *cli) restore(ctx context.Context, args []string) error {
	fs := c.flagSet("restore", "restore SESSION --turn N [--after]\n\nPuts the session's worktree back to the state before turn N (undoing it and\nevery later turn), or with --after to the state turn N left.")
	turn := fs.Int64("turn", 0, "the turn whose checkpoint to restore (required)")
	after := fs.Bool("after", false, "restore the state the turn left instead of the one before it")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *turn <= 0 {
		fs.Usage()
		return fmt.Errorf("restore: --turn is required")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	if err := api.Restore(ctx, pos[0], *turn, *after); err != nil {
		return err
	}
	when := "before"
	if *after {
		when = "after"
	}
	fmt.Fprintf(c.stdout, "worktree of %s restored to its state %s turn %d\n", pos[0], when, *turn)
	return nil
}

func (c *cli) cancel(ctx context.Context, args []string) error {
	fs := c.flagSet("cancel", "cancel SESSION\n\nCancels the session's running turn and waits until it has ended.")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	if err := api.Cancel(ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "turn of %s cancelled\n", pos[0])
	return nil
}

const permissionsUsage = `  list [SESSION]                    list the pending permission requests (of every session without SESSION)
  answer SESSION REQUEST CHOICE     answer one: allow_once, allow_always, reject_once, reject_always (or allow, deny)
  remembered SESSION                list the "always" answers the session keeps
  forget SESSION                    take them back: the agents' next requests are asked again
`

func (c *cli) permissions(ctx context.Context, args []string) error {
	sub, args, err := c.subcommand("permissions", permissionsUsage, args)
	if err != nil {
		return err
	}
	switch sub {
	case "list", "ls":
		fs := c.flagSet("permissions list", "permissions list [SESSION] [--json]\n\nLists the permission requests that wait for an answer: the session's, or\nwithout SESSION those of every session, each with how to answer it.")
		asJSON := fs.Bool("json", false, "print the requests as JSON")
		pos, err := c.parse(fs, args, 0, 1)
		if err != nil {
			return err
		}
		api, err := c.client()
		if err != nil {
			return err
		}
		var list []permission.Pending
		if len(pos) == 1 {
			list, err = api.Permissions(ctx, pos[0])
		} else {
			list, err = api.AllPermissions(ctx)
		}
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(list)
		}
		if len(pos) == 0 {
			return c.printAllPending(list)
		}
		if len(list) == 0 {
			fmt.Fprintln(c.stdout, "no pending permission requests")
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REQUEST\tAGENT\tACTION\tRISK\tWAITS UNTIL\tTITLE\tOPTIONS")
		for _, p := range list {
			var kinds []string
			for _, o := range p.Request.Options {
				kinds = append(kinds, o.Kind)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, termLine(p.Request.Agent), termLine(string(p.Request.Action)), p.Risk,
				p.Deadline.Local().Format(time.TimeOnly), oneLine(p.Request.Title, 50), strings.Join(kinds, ","))
		}
		return tw.Flush()
	case "answer":
		fs := c.flagSet("permissions answer", "permissions answer SESSION REQUEST CHOICE\n\nAnswers a pending permission request. CHOICE is an option kind: allow_once,\nallow_always, reject_once or reject_always; allow and deny also work.")
		pos, err := c.parse(fs, args, 3, 3)
		if err != nil {
			return err
		}
		api, err := c.client()
		if err != nil {
			return err
		}
		if err := api.Answer(ctx, pos[0], pos[1], pos[2]); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "request %s answered: %s\n", pos[1], pos[2])
		return nil
	case "remembered":
		fs := c.flagSet("permissions remembered", "permissions remembered SESSION [--json]\n\nLists the answers the session remembers: each \"Always allow in this\nsession\" or \"Always reject\" given to one of its agents for a kind of action,\nwhich answers that agent's later requests of that kind without asking. They\nare kept with the session (across restarts, moves and take-overs) until it\ncloses or permissions forget takes them back.")
		asJSON := fs.Bool("json", false, "print the answers as JSON")
		pos, err := c.parse(fs, args, 1, 1)
		if err != nil {
			return err
		}
		api, err := c.client()
		if err != nil {
			return err
		}
		list, err := api.Remembered(ctx, pos[0])
		if err != nil {
			return err
		}
		if *asJSON {
			if list == nil {
				list = []permission.Remembered{}
			}
			return c.printJSON(list)
		}
		if len(list) == 0 {
			fmt.Fprintf(c.stdout, "session %s remembers no answer: its agents' requests are asked\n", pos[0])
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AGENT\tACTION\tANSWER")
		for _, r := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", termLine(r.Agent), termLine(string(r.Action)), kindLabel(r.Kind))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "take them back: %s permissions forget %s\n", c.self(), pos[0])
		return nil
	case "forget":
		fs := c.flagSet("permissions forget", "permissions forget SESSION\n\nTakes back every answer the session remembers (see permissions remembered):\nits agents' next requests are asked again.")
		pos, err := c.parse(fs, args, 1, 1)
		if err != nil {
			return err
		}
		api, err := c.client()
		if err != nil {
			return err
		}
		n, err := api.ForgetRemembered(ctx, pos[0])
		if err != nil {
			return err
		}
		switch n {
		case 0:
			fmt.Fprintf(c.stdout, "session %s remembered no answer\n", pos[0])
		case 1:
			fmt.Fprintf(c.stdout, "session %s forgot 1 remembered answer: its agents' next requests are asked again\n", pos[0])
		default:
			fmt.Fprintf(c.stdout, "session %s forgot %d remembered answers: its agents' next requests are asked again\n", pos[0], n)
		}
		return nil
	}
	return fmt.Errorf("permissions: unknown command %q (want list, answer, remembered or forget)", sub)
}

func (c *cli) ps(ctx context.Context, args []string) error {
	fs := c.flagSet("ps", "ps [--json]\n\nShows the pool: every warm agent with its session, pid, state, idle time and\nmemory (RSS of its process group); then the sessions with events waiting in\nthe store's write queue (events, bytes, the oldest one's wait) or whose agent\nwas held waiting for room there (for how long; SLOWED while it is); then the\nMCP servers the daemon shares.")
	asJSON := fs.Bool("json", false, "print the pool as JSON")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	st, err := api.Pool(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(st)
	}
	if len(st.Backends) == 0 {
		fmt.Fprintln(c.stdout, "no agents running")
	} else {
		c.renderBackends(st.Backends)
	}
	c.renderWriteQueues(st.WriteQueues) // cli_fair.go
	c.renderMCPShares(ctx, api)         // cli_mcpshare.go
	return nil
}

// renderBackends prints backends as a table.
func (c *cli) renderBackends(list []pool.AgentStatus) {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tAGENT\tKIND\tPID\tSTATE\tIDLE\tRSS\tRESTARTS\tCONFINED")
	for _, b := range list {
		pid := "-"
		if b.PID > 0 {
			pid = fmt.Sprint(b.PID)
		}
		idle := "-"
		if b.State == pool.StateIdle {
			idle = b.IdleFor.Round(time.Second).String()
		}
		state := b.State
		if b.Spare {
			state += " (spare)" // no session has adopted it yet
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", b.Session, b.Agent, b.Kind, pid, state, idle, formatBytes(b.RSS), b.Restarts, confinedLabel(b.Confinement))
	}
	_ = tw.Flush()
}

// confinedLabel says in a word or two how an agent is confined: its
// containment, "+landlock" when rules apply, "+namespaces" when it runs in
// namespaces of its own (its network through the egress proxy), and "!"
// when something is missing (the warning is in GET /v1/pool and the
// agent.ready event).
func confinedLabel(c *backends.Confinement) string {
	if c == nil || c.Containment == "" {
		return "-"
	}
	s := c.Containment
	if c.Landlock > 0 {
		s += "+landlock"
	}
	if c.Namespaces {
		s += "+namespaces"
	}
	if c.Landlock > 0 || c.Namespaces {
		if c.Network != "" && c.Network != backends.NetworkAll {
			s += " net:" + c.Network
		}
	}
	if c.Warning != "" {
		s += " !"
	}
	return s
}

// formatBytes formats a byte count in MiB (or "-" for none).
func formatBytes(n int64) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
