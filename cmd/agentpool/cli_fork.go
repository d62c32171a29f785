package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/agentpool/agentpool/httpapi"
)

func (c *cli) sessionFork(ctx context.Context, args []string) error {
	fs := c.flagSet("session fork", "session fork SESSION [--agent ID] [--turn N] [--title T] [--json]\n\n"+
		"Makes a new session from SESSION: its worktree, on its own branch, starts at\n"+
		"SESSION's files as they are now, uncommitted changes included (or, with\n"+
		"--turn, as turn N left them), and its history starts with SESSION's (up to\n"+
		"turn N). SESSION is not touched, even while its agent works. The fork's\n"+
		"agent (SESSION's unless --agent) is briefed on that history.")
	agent := fs.String("agent", "", "the fork's agent (default: the session's)")
	turn := fs.Int64("turn", 0, "fork at the end of this turn instead of now")
	title := fs.String("title", "", "the fork's title (default: \"fork of\" the session's)")
	asJSON := fs.Bool("json", false, "print the new session as JSON")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *turn < 0 {
		return fmt.Errorf("session fork: --turn must be a turn number (1 for the first)")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	sess, err := api.Fork(ctx, pos[0], httpapi.ForkRequest{Agent: *agent, Turn: *turn, Title: *title})
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(sess)
	}
	at := "its state now"
	if *turn > 0 {
		at = fmt.Sprintf("turn %d", *turn)
	}
	fmt.Fprintf(c.stdout, "session %s forked from %s at %s\n", sess.ID, pos[0], at)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  agent\t%s\n", sess.ActiveAgent)
	fmt.Fprintf(tw, "  branch\t%s\n", sess.Worktree.Branch)
	fmt.Fprintf(tw, "  worktree\t%s\n", sess.Worktree.Path)
	fmt.Fprintf(tw, "  history\t%d turn%s of %s\n", sess.LastTurn, plural(int(sess.LastTurn)), pos[0])
	_ = tw.Flush()
	fmt.Fprintf(c.stdout, "\nNext: %s prompt %s \"describe what you want\"\n", c.self(), sess.ID)
	return nil
}
