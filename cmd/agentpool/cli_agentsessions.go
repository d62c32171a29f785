package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// takeUpWait bounds how long session new waits to learn whether the agent
// took up the session it was given.
const takeUpWait = 90 * time.Second

// agentSessionList prints agent's own sessions of repo (the current
// repository when "").
func (c *cli) agentSessionList(ctx context.Context, agent, repo string, asJSON bool) error {
	dir, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	if repo == "" {
		if dir, err = gitTopLevel(ctx, dir); err != nil {
			return err
		}
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	c.progress("asking %s for its sessions of %s… ", agent, dir)
	list, err := api.AgentSessions(ctx, agent, dir)
	if err != nil {
		c.progress("failed\n")
		return err
	}
	c.progress("done\n")
	if asJSON {
		return c.printJSON(list)
	}
	if len(list) == 0 {
		fmt.Fprintf(c.stdout, "%s has no sessions of %s\n", agent, dir)
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT SESSION\tUPDATED\tTITLE")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", termLine(s.ID), termLine(s.UpdatedAt), oneLine(s.Title, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "\nTake one up in a new session: %s session new --repo %s --agent %s --agent-session ID\n", c.self(), dir, agent)
	return nil
}

// reportTakeUp says whether the agent of the new session s took up the
// session agentSession: it follows the session's events until the agent
// is ready, lost the context, or exited. An agent that refused says why:
// agents key their history by directory, and the session's worktree is
// not the directory the session was made in.
func (c *cli) reportTakeUp(ctx context.Context, api *httpapi.Client, s pool.Session, agentSession string, warm bool) {
	if !warm {
		fmt.Fprintf(c.stdout, "  taking up %s's session %s at the first prompt\n", s.ActiveAgent, agentSession)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, takeUpWait)
	defer cancel()
	errDone := errors.New("done")
	var lost string
	err := api.Events(ctx, s.ID, 0, func(ev backends.Event) error {
		switch ev.Type {
		case backends.EventAgentContextLost:
			var d struct {
				Reason string `json:"reason"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			lost = oneLine(d.Reason, 200)
		case backends.EventAgentReady:
			var d struct {
				Resumed   bool   `json:"resumed"`
				ResumedBy string `json:"resumed_by"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			switch {
			case d.Resumed:
				fmt.Fprintf(c.stdout, "  %s took up its session %s (session/%s)\n", s.ActiveAgent, agentSession, d.ResumedBy)
			default:
				fmt.Fprintf(c.stdout, "  %s refused to take up its session %s and started a new one: %s\n", s.ActiveAgent, agentSession, lost)
			}
			return errDone
		case backends.EventAgentExited:
			fmt.Fprintf(c.stdout, "  %s exited before taking up its session %s (%s events %s)\n", s.ActiveAgent, agentSession, c.self(), s.ID)
			return errDone
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDone) {
		fmt.Fprintf(c.stdout, "  could not learn whether %s took up its session %s: %v (%s events %s)\n", s.ActiveAgent, agentSession, err, c.self(), s.ID)
	}
}
