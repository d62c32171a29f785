package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
)

// renderMCPShares prints the MCP servers the daemon shares, if any: the
// names agents know each by, its process, clients, calls, errors, starts
// and memory. A daemon that does not list them is skipped quietly.
func (c *cli) renderMCPShares(ctx context.Context, api *httpapi.Client) {
	list, err := api.MCPShares(ctx)
	if err != nil || len(list) == 0 {
		return
	}
	fmt.Fprintln(c.stdout)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARED MCP\tCOMMAND\tPID\tCLIENTS\tCALLS\tERRORS\tSTARTS\tRSS\tLAST CALL")
	for _, s := range list {
		pid := "-"
		if s.Running {
			pid = fmt.Sprint(s.PID)
		}
		last := "-"
		if !s.LastUse.IsZero() {
			last = time.Since(s.LastUse).Round(time.Second).String() + " ago"
		}
		cmd := strings.Join(s.Command, " ")
		if len(cmd) > 48 {
			cmd = cmd[:47] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", strings.Join(s.Names, ","), termText(cmd), pid, s.Clients, s.Calls, s.Errors, s.Starts, formatBytes(s.RSS), last)
	}
	_ = tw.Flush()
}

// sharingSummary says which stdio servers an agent got as the daemon's
// shared copy (and how) and which it starts itself (and why), in a
// parenthesis; "" when the event says nothing of it.
func sharingSummary(sharing []backends.MCPSharing) string {
	var shared, own []string
	for _, sh := range sharing {
		if sh.Shared {
			shared = append(shared, sh.Name+" via "+sh.Via)
		} else {
			own = append(own, sh.Name+" — "+sh.Reason)
		}
	}
	var parts []string
	if len(shared) > 0 {
		parts = append(parts, "shared: "+strings.Join(shared, ", "))
	}
	if len(own) > 0 {
		parts = append(parts, "own copy: "+strings.Join(own, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}
