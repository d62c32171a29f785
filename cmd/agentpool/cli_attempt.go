package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentpool/agentpool/attempts"
	"github.com/agentpool/agentpool/pool"
)

// attemptUsage is the synopsis and description of attempt.
const attemptUsage = `attempt "PROMPT" (--agents A,B,C | --agent A --n 3) [--check CMD] [--repo DIR] [--base REF] [--title T] [--wait] [--json]
attempt list [--json]
attempt show ID [--wait] [--json]
attempt pick ID SESSION [--discard] [--squash] [--json]

Runs one prompt as several sessions side by side, all started on the same
base commit (--base, default the repository's HEAD) and prompted together:
one per agent of --agents, or --n of one --agent. After its turn, each
attempt's worktree runs --check (a shell command such as "go test ./...")
confined like a trusted setup command. --wait waits for every attempt to end
and prints a comparison: stop reason, time, files and lines changed, check.
While it waits, it shows each permission request an attempt's agent makes
and asks it when stdin is a terminal, as prompt does (otherwise it prints
the permissions answer command to run). Interrupting the wait (Ctrl-C)
leaves the attempts running in the daemon: attempt show ID --wait comes
back to them.

pick merges the chosen attempt's branch into the base branch (like session
merge) and closes the other attempts' sessions, keeping their branches, or
deleting them with --discard.`

// attempt runs `attempt ...`.
func (c *cli) attempt(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return c.attemptList(ctx, args[1:])
		case "show":
			return c.attemptShow(ctx, args[1:])
		case "pick":
			return c.attemptPick(ctx, args[1:])
		}
	}
	fs := c.flagSet("attempt", attemptUsage)
	agents := fs.String("agents", "", "comma-separated agents, one attempt each")
	agent := fs.String("agent", "", "the agent of every attempt (with --n)")
	n := fs.Int("n", 0, fmt.Sprintf("how many attempts of --agent (1..%d)", attempts.MaxAttempts))
	check := fs.String("check", "", "a shell command run in each worktree after its turn")
	repo := fs.String("repo", "", "the git repository (default: the one holding the current directory)")
	base := fs.String("base", "", "the branch or commit every attempt starts from (default: HEAD)")
	title := fs.String("title", "", "a title for the attempts")
	wait := fs.Bool("wait", false, "wait for every attempt to end and print the comparison")
	asJSON := fs.Bool("json", false, "print the set as JSON")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	if *repo == "" {
		if dir, err = gitTopLevel(ctx, dir); err != nil {
			return err
		}
	}
	req := attempts.Request{Prompt: pos[0], Repo: dir, Base: *base, Agent: *agent, N: *n, Check: *check, Title: *title}
	if *agents != "" {
		for _, a := range strings.Split(*agents, ",") {
			req.Agents = append(req.Agents, strings.TrimSpace(a))
		}
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	set, err := api.StartAttempts(ctx, req)
	if err != nil {
		return err
	}
	if *wait {
		if set, err = c.waitAttempts(ctx, set.ID, *asJSON); err != nil {
			return err
		}
	}
	if *asJSON {
		return c.printJSON(set)
	}
	c.renderAttempts(set)
	return nil
}

// waitAttempts waits for the set id until it is no longer running,
// showing the permission requests its attempts wait for (cli_attempt_perm.go)
// on stdout, or with asJSON on stderr.
func (c *cli) waitAttempts(ctx context.Context, id string, asJSON bool) (attempts.Set, error) {
	api, err := c.client()
	if err != nil {
		return attempts.Set{}, err
	}
	w := c.stdout
	if asJSON {
		w = c.stderr // keep stdout JSON
	}
	r := newRenderer(w, c.stderr, c.outTTY && !asJSON)
	seen := map[string]bool{}
	c.progress("waiting for the attempts of %s (their permission requests are shown here)…\n", id)
	for {
		set, err := api.GetAttempts(ctx, id, 30*time.Second)
		if ctx.Err() != nil {
			return set, c.attemptsInterrupted(id)
		}
		if err != nil {
			return set, err
		}
		if set.State != attempts.SetRunning {
			c.progress("the attempts of %s are done\n", id)
			return set, nil
		}
		if c.askAttempts(ctx, api, set, seen, r) > 0 || len(pendingIDs(set)) == 0 {
			continue
		}
		// Every request waiting was shown: it is answered elsewhere.
		select {
		case <-ctx.Done():
			return set, c.attemptsInterrupted(id)
		case <-time.After(attemptPollEvery):
		}
	}
}

// attemptsInterrupted is the error of a wait for the attempts of set id
// that the user interrupted (Ctrl-C, at a permission question too): the
// attempts run on in the daemon, and it says how to come back to them,
// answer what they wait for, or stop one.
func (c *cli) attemptsInterrupted(id string) error {
	return fmt.Errorf("interrupted: the attempts of %s run on without you; come back to them with: %s attempt show %s --wait; "+
		"see what they wait for with: %s permissions list; stop one with: %s cancel SESSION",
		id, c.self(), id, c.self(), c.self())
}

// attemptList runs `attempt list`.
func (c *cli) attemptList(ctx context.Context, args []string) error {
	fs := c.flagSet("attempt list", attemptUsage)
	asJSON := fs.Bool("json", false, "print the sets as JSON")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	sets, err := api.ListAttempts(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(sets)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tATTEMPTS\tPICKED\tCREATED\tPROMPT")
	for _, s := range sets {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, s.State, len(s.Attempts), dash(s.Picked),
			s.CreatedAt.Local().Format("2006-01-02 15:04"), firstLineOf(s.Prompt, 50))
	}
	return tw.Flush()
}

// attemptShow runs `attempt show`.
func (c *cli) attemptShow(ctx context.Context, args []string) error {
	fs := c.flagSet("attempt show", attemptUsage)
	wait := fs.Bool("wait", false, "wait for every attempt to end")
	asJSON := fs.Bool("json", false, "print the set as JSON")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	var set attempts.Set
	if *wait {
		set, err = c.waitAttempts(ctx, pos[0], *asJSON)
	} else {
		set, err = api.GetAttempts(ctx, pos[0], 0)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(set)
	}
	c.renderAttempts(set)
	return nil
}

// attemptPick runs `attempt pick`.
func (c *cli) attemptPick(ctx context.Context, args []string) error {
	fs := c.flagSet("attempt pick", attemptUsage)
	discard := fs.Bool("discard", false, "delete the other attempts' branches instead of keeping them")
	squash := fs.Bool("squash", false, "make one commit summarising the attempt instead of a merge")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := c.parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	res, err := api.PickAttempt(ctx, pos[0], attempts.PickRequest{Session: pos[1], Discard: *discard, Squash: *squash})
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(res)
	}
	c.renderMerge(res.Merge)
	kept := "kept"
	if *discard {
		kept = "deleted"
	}
	for _, a := range res.Attempts {
		if a.Closed {
			fmt.Fprintf(c.stdout, "closed %s (%s), its branch %s\n", a.Session, a.Agent, kept)
		} else if a.Session != res.Picked && a.Error != "" {
			fmt.Fprintf(c.stdout, "%s (%s): %s\n", a.Session, termLine(a.Agent), termText(a.Error))
		}
	}
	return nil
}

// renderAttempts prints a set and the comparison of its attempts.
func (c *cli) renderAttempts(s attempts.Set) {
	fmt.Fprintf(c.stdout, "attempts %s (%s) on %s of %s\n", s.ID, s.State, short(s.BaseCommit), s.Repo)
	if s.Check != "" {
		fmt.Fprintf(c.stdout, "check: %s\n", s.Check)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tAGENT\tSTATE\tSTOP\tTIME\tTOKENS\tFILES\tLINES\tCHECK")
	for _, a := range s.Attempts {
		check := "-"
		if a.Check != nil {
			check = a.Check.State
			if a.Check.State == attempts.CheckFailed {
				check += fmt.Sprintf(" (exit %d)", a.Check.ExitCode)
			}
		}
		mark := ""
		if a.Session == s.Picked {
			mark = " (picked)"
		}
		tokens := "-"
		var u pool.Tokens
		if len(a.Usage) > 0 && json.Unmarshal(a.Usage, &u) == nil && u.Total > 0 {
			tokens = strconv.FormatInt(u.Total, 10)
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%d\t+%d -%d\t%s\n", a.Session, mark, a.Agent, a.State, dash(a.StopReason),
			(time.Duration(a.DurationMS) * time.Millisecond).Round(100*time.Millisecond), tokens, a.FilesChanged, a.LinesAdded, a.LinesRemoved, check)
	}
	_ = tw.Flush()
	for _, a := range s.Attempts {
		if a.Error != "" {
			fmt.Fprintf(c.stdout, "%s: %s\n", a.Session, termText(a.Error))
		}
	}
	c.renderPending(c.stdout, s)
	if s.State == attempts.SetDone {
		fmt.Fprintf(c.stdout, "pick one: %s attempt pick %s SESSION [--discard]\n", c.self(), s.ID)
	}
}

// firstLineOf is the first line of s, at most n runes.
func firstLineOf(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
