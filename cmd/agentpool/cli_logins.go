package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"
)

// loginsUsage is the synopsis and description of logins.
const loginsUsage = `logins [revoke ID | revoke --all]

Lists the web pages logged in to the daemon (each login link redeemed
gives its browser a credential, valid 7 days), with when each logged in,
was last used and expires, and its browser. "revoke ID" logs that page
out at once; "revoke --all" logs out every page (do it after changing the
token, which does not revoke them).`

// logins runs `logins` and `logins revoke`.
func (c *cli) logins(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "revoke" {
		return c.revokeLogins(ctx, args[1:])
	}
	fs := c.flagSet("logins", loginsUsage)
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	list, err := api.PageSessions(ctx)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		fmt.Fprintf(c.stdout, "no page is logged in ('%s open' prints a login link)\n", c.self())
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLOGGED IN\tLAST USED\tEXPIRES\tBROWSER")
	for _, p := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.ID, stamp(p.CreatedAt), stamp(p.LastUsed), stamp(p.ExpiresAt), p.UserAgent)
	}
	return tw.Flush()
}

// revokeLogins runs `logins revoke ID|--all`.
func (c *cli) revokeLogins(ctx context.Context, args []string) error {
	fs := c.flagSet("logins revoke", "logins revoke ID | --all\n\nLogs a web page out at once (all of them with --all).")
	all := fs.Bool("all", false, "log out every page")
	pos, err := c.parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	if *all == (len(pos) == 1) {
		fs.SetOutput(c.stderr)
		fs.Usage()
		return errors.New("logins revoke: give one page's ID, or --all")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	if *all {
		n, err := api.RevokePageSessions(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "%d page(s) logged out\n", n)
		return nil
	}
	if err := api.RevokePageSession(ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "page %s logged out\n", pos[0])
	return nil
}

// stamp formats a time of a listing in local time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04")
}
