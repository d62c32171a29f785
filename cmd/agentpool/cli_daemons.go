package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"text/tabwriter"
)

// How the client came to a daemon it picked among the listed ones (see
// chooseDaemon), for messages.
const (
	homeFromListedNear = "the nearest of your running daemons whose data directory is at or above the current directory"
	homeFromListedOnly = "the only one of your daemons running; none runs at or above the current directory or in the per-user default"
)

// chooseDaemon returns the data directory and daemon the client talks to,
// and the daemons listed in the per-user directory (see listDaemons). The
// data directory found by findHome is used when it was given ($AGENTPOOL_HOME)
// or found at or above the current directory; when it is the per-user
// default, the client picks, among the running daemons, the nearest whose
// data directory is at or above the current directory, else the per-user
// default's, else the only one running. When the chosen data directory's
// daemon is not running the client never goes on to another one: the
// error names the daemons that run and how to pick one.
func (c *cli) chooseDaemon() (home, from string, d daemonInfo, running []runningDaemon, err error) {
	running, lerr := listDaemons(c.env.Daemons)
	home, from = c.env.Home, c.env.HomeFrom
	d, err = readDaemonFile(home)
	missing := errors.Is(err, fs.ErrNotExist)
	if err != nil && !missing {
		return home, from, daemonInfo{}, running, fmt.Errorf("find the daemon: %w", err)
	}
	fromDefault := from == homeFromUser || from == homeFromUserIgnored
	if fromDefault {
		best, depth := -1, -1
		for i, r := range running {
			if n, ok := atOrAbove(r.Home, c.env.Cwd); ok && c.env.Cwd != "" && n > depth {
				best, depth = i, n
			}
		}
		if best >= 0 {
			return running[best].Home, homeFromListedNear, running[best].info, running, nil
		}
	}
	if err == nil && d.alive() {
		return home, from, d, running, nil
	}
	if fromDefault && len(running) == 1 {
		return running[0].Home, homeFromListedOnly, running[0].info, running, nil
	}
	return home, from, daemonInfo{}, running, c.noDaemon(d, missing, running, lerr)
}

// noDaemon is the error of a data directory whose daemon does not run
// (missing: it has no daemon.json; else d is what it names): how to start
// one, and the user's daemons that run elsewhere with how to pick one;
// lerr is why the per-user list could not be read, if it could not.
func (c *cli) noDaemon(d daemonInfo, missing bool, running []runningDaemon, lerr error) error {
	var b strings.Builder
	if missing {
		from := ""
		if c.env.HomeFrom != "" {
			from = " (" + c.env.HomeFrom + ")"
		}
		fmt.Fprintf(&b, "no daemon found in %s%s: start one with: %s serve", c.env.Home, from, c.self())
	} else {
		fmt.Fprintf(&b, "the daemon of %s (pid %d) is not running: start one with: %s serve", c.env.Home, d.PID, c.self())
	}
	if len(running) == 0 {
		fmt.Fprintf(&b, "; or point to a running one with AGENTPOOL_HOME=DIR (its data directory) or %s and %s", envAddr, envToken)
	} else {
		fmt.Fprintf(&b, "; or use one of your daemons that run (%s daemons lists them) by its data directory:", c.self())
		for _, r := range running {
			fmt.Fprintf(&b, "\n  AGENTPOOL_HOME=%s %s ...   (listening on %s)", shellQuote(r.Home), c.self(), r.Addr)
		}
	}
	if lerr != nil {
		fmt.Fprintf(&b, "\n(your other daemons could not be listed: %v)", lerr)
	}
	return errors.New(b.String())
}

// findDaemon returns the daemon the client talks to (see chooseDaemon),
// from then on using its data directory, and names it on stderr when
// several of the user's daemons run and the user did not name one
// ($AGENTPOOL_HOME), so that the output says where the commands went
// while stdout stays the command's own.
func (c *cli) findDaemon() (daemonInfo, error) {
	home, from, d, running, err := c.chooseDaemon()
	if err != nil {
		return daemonInfo{}, err
	}
	explicit := c.env.HomeFrom == homeFromEnv || c.env.HomeFrom == ""
	c.env.Home, c.env.HomeFrom = home, from
	n := len(running)
	if !listed(running, home) {
		n++
	}
	if !explicit && n > 1 {
		fmt.Fprintf(c.stderr, "agentpool: using the daemon of %s at %s (%d of your daemons run: %s daemons lists them; AGENTPOOL_HOME=DIR picks one)\n",
			home, d.Addr, n, c.self())
	}
	return d, nil
}

// listed says whether home is the data directory of one of running.
func listed(running []runningDaemon, home string) bool {
	for _, r := range running {
		if r.Home == home {
			return true
		}
	}
	return false
}

// daemonsUsage is the daemons command's synopsis and help.
const daemonsUsage = `daemons [--json]

Lists your running daemons: each daemon leaves a pointer to its data
directory in the per-user directory ($XDG_STATE_HOME/agentpool/daemons, or
~/.local/state/agentpool/daemons) while it runs; stale ones are removed. The
one a command run here talks to is marked *: $AGENTPOOL_HOME when set, else
the nearest .agentpool at or above the current directory, else the nearest
running daemon whose data directory is at or above it, else the per-user
default's, else the only one running. When several run, every command names
on stderr the daemon it talks to; AGENTPOOL_HOME=DIR picks another.`

// daemons lists the user's running daemons.
func (c *cli) daemons(args []string) error {
	fs := c.flagSet("daemons", daemonsUsage)
	asJSON := fs.Bool("json", false, "print the daemons as JSON")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	home, _, d, running, cerr := c.chooseDaemon()
	if cerr == nil && c.env.Addr == "" && !listed(running, home) {
		running = append(running, runningDaemon{Home: home, Addr: d.Addr, PID: d.PID})
	}
	type row struct {
		runningDaemon
		Current bool `json:"current"`
	}
	rows := make([]row, 0, len(running))
	for _, r := range running {
		rows = append(rows, row{r, cerr == nil && c.env.Addr == "" && r.Home == home})
	}
	if *asJSON {
		return c.printJSON(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(c.stdout, "no daemon running: start one with: %s serve\n", c.self())
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tDATA DIRECTORY\tADDRESS\tPID")
	for _, r := range rows {
		mark := ""
		if r.Current {
			mark = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", mark, termText(r.Home), termText(r.Addr), r.PID)
	}
	return tw.Flush()
}
