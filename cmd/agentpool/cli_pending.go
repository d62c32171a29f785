package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentpool/agentpool/permission"
)

// printAllPending prints what waits for the user across sessions: each
// request's session, agent, what it asks, how long it has waited, and the
// command that answers it.
func (c *cli) printAllPending(list []permission.Pending) error {
	if len(list) == 0 {
		fmt.Fprintln(c.stdout, "nothing waits for an answer")
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tAGENT\tASKS\tWAITING\tANSWER WITH")
	for _, p := range list {
		r := p.Request
		asks := string(r.Action)
		if r.Title != "" {
			asks += ": " + oneLine(r.Title, 50)
		}
		kinds := offeredKinds(eventData{Options: r.Options})
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s permissions answer %s %s %s\n", r.Session, termLine(r.Agent), termLine(asks),
			now.Sub(p.RequestedAt).Round(time.Second), c.self(), r.Session, p.ID, strings.Join(kinds, "|"))
	}
	return tw.Flush()
}
