package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// hostsCmd: agentpool hosts [--json].
func (c *cli) hostsCmd(ctx context.Context, args []string) error {
	fs := c.flagSet("hosts", "hosts [--json]\n\nLists the daemons sharing this daemon's store (one on SQLite; every host of\nthe cluster on PostgreSQL): each one's address, how long ago it last\nheartbeat, its capacity (max_warm), its warm agents and open sessions, and the\nproviders it can run. The one answering is marked with *.")
	asJSON := fs.Bool("json", false, "print the hosts as JSON")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	list, err := api.Hosts(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(list)
	}
	if len(list) == 0 {
		fmt.Fprintln(c.stdout, "no host has registered yet")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tADDRESS\tHEARTBEAT\tCAPACITY\tWARM\tSESSIONS\tPROVIDERS")
	for _, h := range list {
		id := h.ID
		if h.Self {
			id += " *"
		}
		beat := (time.Duration(h.HeartbeatAgeMS) * time.Millisecond).Round(100*time.Millisecond).String() + " ago"
		if !h.Alive {
			beat += " (gone)"
		}
		providers := strings.Join(h.Providers, ",")
		if providers == "" {
			providers = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", id, h.Advertise, beat, h.Capacity, h.Warm, h.Sessions, providers)
	}
	return tw.Flush()
}
