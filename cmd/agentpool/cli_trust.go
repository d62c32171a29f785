package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/worktree"
)

// trustUsage is the synopsis and description of trust.
const trustUsage = `trust [REPO] [--yes] [--setup] | trust --list | trust --revoke REPO

A repository's .agentpool.json (files to copy into each new worktree, a
setup command to run there) comes from the repository, so it runs only once
you trusted its exact content. trust shows the file (default: the one of
the repository holding the current directory) and what it would do, asks
you to confirm, and records the hash of what it showed in the daemon's
home; a file that changes afterwards (an edit, a merged branch) is
untrusted again. Sessions created while it was untrusted skipped their
setup: --setup (or answering yes) runs it in them now.`

// trust runs `trust`.
func (c *cli) trust(ctx context.Context, args []string) error {
	fs := c.flagSet("trust", trustUsage)
	yes := fs.Bool("yes", false, "trust the file as shown without asking (for scripts)")
	setup := fs.Bool("setup", false, "run the setup now in the open sessions that skipped it")
	list := fs.Bool("list", false, "list the trusted setup files")
	revoke := fs.Bool("revoke", false, "forget the trust of REPO's setup file")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := c.parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	if *list {
		return c.trustList(ctx, api, *asJSON)
	}
	repo := ""
	if len(pos) > 0 && worktree.IsURL(pos[0]) {
		repo = pos[0] // a repository given by URL: the daemon reads its mirror
	} else if len(pos) > 0 {
		if repo, err = filepath.Abs(pos[0]); err != nil {
			return err
		}
	} else if *revoke {
		fs.Usage()
		return errors.New("trust --revoke: which repository? (trust --list lists them)")
	} else if repo, err = gitTopLevel(ctx, "."); err != nil {
		return err
	}
	if *revoke {
		if err := api.RevokeTrust(ctx, repo); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "the setup file of %s is no longer trusted\n", repo)
		return nil
	}
	sf, err := api.SetupFile(ctx, repo)
	if err != nil {
		if httpapi.IsCode(err, httpapi.CodeNotFound) {
			return fmt.Errorf("%s has no %s, so there is nothing to trust.\n"+
				"Trust is for a repository's %s, which can copy untracked files (such as .env) into each new\n"+
				"session's worktree and run a setup command there: agentpool follows it only once you have read\n"+
				"and trusted it (see \"Worktree setup\" in docs/sessions.md)", repo, setupFileName, setupFileName)
		}
		return err
	}
	if !*asJSON {
		c.showSetupFile(sf)
	}
	if !sf.Trusted && !*yes {
		if !c.inTTY {
			return fmt.Errorf("trust: not trusted: stdin is not a terminal to ask on; after reading the file above, run: %s trust --yes %s", c.self(), shellQuote(repo))
		}
		if !c.confirm("Trust this file, so that new sessions copy and run what it says? [y/N] ") {
			return errors.New("trust: not trusted")
		}
	}
	res, err := api.Trust(ctx, repo, sf.SHA256)
	if err != nil {
		if httpapi.IsCode(err, httpapi.CodeConflict) {
			return fmt.Errorf("trust: the file changed since it was shown: nothing was trusted; run the command again to see it as it is: %w", err)
		}
		return err
	}
	if *asJSON {
		return c.printJSON(res)
	}
	fmt.Fprintf(c.stdout, "trusted: %s (sha256 %s)\n", res.File, res.SHA256)
	if len(res.Waiting) == 0 {
		return nil
	}
	fmt.Fprintf(c.stdout, "%d open %s skipped this setup: %s\n", len(res.Waiting), pluralOf(len(res.Waiting), "session", "sessions"), strings.Join(res.Waiting, " "))
	if !*setup && !(c.inTTY && c.confirm("Run it in them now? [y/N] ")) {
		fmt.Fprintf(c.stdout, "run it later with: %s session setup SESSION\n", c.self())
		return nil
	}
	var errs []error
	for _, id := range res.Waiting {
		if err := api.RunSetup(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", id, err))
			continue
		}
		fmt.Fprintf(c.stdout, "setup started in session %s (its events: %s events %s)\n", id, c.self(), id)
	}
	return errors.Join(errs...)
}

// confirm asks a y/N question on stdout and reads the answer.
func (c *cli) confirm(q string) bool {
	a := strings.ToLower(strings.TrimSpace(c.ask(q)))
	return a == "y" || a == "yes"
}

// ask prints q on stdout and reads a line of answer.
func (c *cli) ask(q string) string {
	if c.in == nil {
		c.in = bufio.NewReader(c.stdin)
	}
	fmt.Fprint(c.stdout, q)
	line, _ := c.in.ReadString('\n')
	return line
}

// showSetupFile prints a setup file: its content, as the repository's
// words, and what it would do.
func (c *cli) showSetupFile(sf httpapi.SetupFile) {
	w := c.stdout
	fmt.Fprintf(w, "%s (sha256 %s)\n", sf.File, sf.SHA256)
	switch {
	case sf.Trusted:
		fmt.Fprintf(w, "trusted since %s\n", sf.TrustedAt.Local().Format(time.DateTime))
	case sf.TrustedSHA256 != "":
		fmt.Fprintf(w, "NOT TRUSTED: it changed since you trusted it (then sha256 %s)\n", sf.TrustedSHA256)
	default:
		fmt.Fprintln(w, "NOT TRUSTED")
	}
	fmt.Fprintln(w, "\nThe repository's file says:")
	// The repository's words, escaped: a control character in them must
	// not hide a line of what the user is asked to trust.
	for _, l := range strings.Split(strings.TrimRight(sf.Content, "\n"), "\n") {
		fmt.Fprintf(w, "  | %s\n", termText(l))
	}
	fmt.Fprintln(w, "\nFor each new session it would:")
	if len(sf.Copy) > 0 {
		fmt.Fprintf(w, "  copy from %s: %s (untracked files only)\n", termLine(sf.Repo), termLine(quoteArgs(sf.Copy)))
	}
	if len(sf.Command) > 0 {
		fmt.Fprintf(w, "  run in the worktree (timeout %s): %s\n", sf.Timeout, termLine(quoteArgs(sf.Command)))
		fmt.Fprintln(w, "    confined: it may write the worktree, its own TMPDIR and the package caches, use the network,")
		fmt.Fprintln(w, "    and read the system; never the daemon's data, your secrets or the main checkout's files")
	}
	fmt.Fprintln(w)
}

// quoteArgs is argv as a shell would read it.
func quoteArgs(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// trustList prints the trusted setup files.
func (c *cli) trustList(ctx context.Context, api *httpapi.Client, asJSON bool) error {
	list, err := api.TrustList(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return c.printJSON(list)
	}
	if len(list) == 0 {
		fmt.Fprintf(c.stdout, "no trusted setup files; trust one with: %s trust [REPO]\n", c.self())
		return nil
	}
	for _, e := range list {
		fmt.Fprintf(c.stdout, "%s  sha256 %s  since %s\n", e.Repo, e.SHA256[:12], e.TrustedAt.Local().Format(time.DateTime))
	}
	return nil
}

// sessionSetup runs `session setup SESSION`.
func (c *cli) sessionSetup(ctx context.Context, args []string) error {
	fs := c.flagSet("session setup", "session setup SESSION\n\nRuns the repository's setup (.agentpool.json: copy, then the setup command)\nin the session's worktree now, once the file is trusted (see trust): for a\nsession created while it was not. Its steps follow on the session's events.")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	if err := api.RunSetup(ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "setup started in session %s (its events: %s events %s)\n", pos[0], c.self(), pos[0])
	return nil
}

// noteSetup tells, after session id was created, that its repository's
// trusted setup command runs now (prompts wait for it) and how to follow
// it, or that its setup file is not trusted (so its setup was skipped)
// and how to trust it.
func (c *cli) noteSetup(ctx context.Context, api *httpapi.Client, w io.Writer, repo, id string) {
	sf, err := api.SetupFile(ctx, repo)
	if err != nil || (len(sf.Copy) == 0 && len(sf.Command) == 0) {
		return
	}
	if sf.Trusted {
		if len(sf.Command) > 0 {
			fmt.Fprintf(w, "  setup running: %s (follow: %s events %s)\n", termLine(quoteArgs(sf.Command)), c.self(), id)
		}
		return
	}
	why := "is not trusted"
	if sf.TrustedSHA256 != "" {
		why = "changed since you trusted it"
	}
	fmt.Fprintf(w, "\nnote: %s %s: its copy and setup command did not run.\n  Read it and trust it: %s trust %s\n",
		sf.File, why, c.self(), shellQuote(sf.Repo))
}

// setupData is the data of setup.* events, as the CLI shows it.
type setupData struct {
	File          string   `json:"file"`
	Repo          string   `json:"repo"`
	SHA256        string   `json:"sha256"`
	TrustedSHA256 string   `json:"trusted_sha256"`
	TrustCommand  string   `json:"trust_command"`
	Command       []string `json:"command"`
	OK            bool     `json:"ok"`
	Error         string   `json:"error"`
	Confinement   *struct {
		Warning string `json:"warning"`
	} `json:"confinement"`
	Copied  []string `json:"copied"`
	Skipped []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"skipped"`
	Timeout  string   `json:"timeout"`
	Output   string   `json:"output"`
	ExitCode *int     `json:"exit_code"`
	Elapsed  int64    `json:"elapsed_ns"`
	Dropped  int64    `json:"dropped_bytes"`
	Tail     []string `json:"tail"`
}

// setupLine summarises a setup.* event, "" for other events.
func setupLine(ev backends.Event) string {
	var d setupData
	_ = json.Unmarshal(ev.Data, &d)
	switch ev.Type {
	case pool.EventSetupUntrusted:
		why := "is not trusted"
		if d.TrustedSHA256 != "" {
			why = "changed since it was trusted"
		}
		return fmt.Sprintf("setup skipped: %s %s (sha256 %.12s); nothing was copied or run; trust it with: %s", d.File, why, d.SHA256, d.TrustCommand)
	case pool.EventSetupStarted:
		s := "setup command started: " + quoteArgs(d.Command)
		if d.Confinement != nil && d.Confinement.Warning != "" {
			s += " (" + d.Confinement.Warning + ")"
		}
		return s
	case pool.EventSetupCopied:
		s := fmt.Sprintf("setup copied %d file%s from the main checkout", len(d.Copied), plural(len(d.Copied)))
		if len(d.Copied) > 0 {
			s += " (" + oneLine(strings.Join(d.Copied, ", "), 60) + ")"
		}
		for _, k := range d.Skipped {
			s += "; skipped " + k.Path + ": " + k.Reason
		}
		if d.Error != "" {
			s += "; " + d.Error
		}
		return oneLine(s, 160)
	case pool.EventSetupOutput:
		return "setup: " + oneLine(d.Output, 100)
	case pool.EventSetupEnded:
		took := ""
		if d.Elapsed > 0 {
			took = " in " + time.Duration(d.Elapsed).Round(100*time.Millisecond).String()
		}
		if d.OK {
			return "setup done" + took
		}
		s := "setup failed" + took
		if d.ExitCode != nil {
			s += fmt.Sprintf(" (exit status %d)", *d.ExitCode)
		}
		return s + ": " + d.Error
	}
	return ""
}
