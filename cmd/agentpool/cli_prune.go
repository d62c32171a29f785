package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// defaultPruneAge is prune's --older-than unless given.
const defaultPruneAge = "7d"

func (c *cli) prune(ctx context.Context, args []string) error {
	fs := c.flagSet("prune", `prune [--older-than AGE] [--branches] [--dry-run] [--json]

Forgets the sessions closed more than AGE ago (default 7d; 36h, 90m, or 0 for
every closed session): their turns, events and permission records leave the
database, their checkpoints and their empty branches leave the repository.
A branch with commits is kept and listed with its head commit, unless
--branches, which deletes it too (each one is printed with its head commit,
from which git branch NAME COMMIT brings it back). A branch checked out
somewhere is always kept. --dry-run says what would go and changes nothing.`)
	age := fs.String("older-than", defaultPruneAge, "prune the sessions closed more than this long ago (7d, 36h, 90m; 0: all closed)")
	branches := fs.Bool("branches", false, "also delete the branches of pruned sessions that have commits")
	dry := fs.Bool("dry-run", false, "show what would be pruned; change nothing")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if _, err := httpapi.ParseAge(*age); err != nil {
		return fmt.Errorf("prune: --older-than: %w", err)
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	res, err := api.Prune(ctx, httpapi.PruneRequest{OlderThan: *age, Branches: *branches, DryRun: *dry})
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(res)
	}
	return c.renderPrune(c.stdout, res, *age, *branches)
}

// renderPrune prints what prune did: each session, what became of its
// branch, and the sessions it could not prune.
func (c *cli) renderPrune(w io.Writer, res pool.PruneResult, age string, branches bool) error {
	var done, failed []pool.PrunedSession
	for _, s := range res.Sessions {
		if s.Pruned {
			done = append(done, s)
		} else {
			failed = append(failed, s)
		}
	}
	verb := "pruned"
	if res.DryRun {
		verb = "would prune"
	}
	if len(res.Sessions) == 0 {
		fmt.Fprintf(w, "no session closed more than %s ago\n", age)
		return nil
	}
	kept := 0
	if len(done) > 0 {
		fmt.Fprintf(w, "%s %d closed %s:\n", verb, len(done), pluralOf(len(done), "session", "sessions"))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, s := range done {
			line, isKept := c.branchFate(s.Branch, res.DryRun)
			if isKept {
				kept++
			}
			fmt.Fprintf(tw, "  %s\tclosed %s\t%s\n", s.Session, s.ClosedAt.Local().Format(time.DateTime), line)
		}
		_ = tw.Flush()
	}
	if len(failed) > 0 {
		fmt.Fprintf(w, "not pruned (tried again by the next prune):\n")
		for _, s := range failed {
			fmt.Fprintf(w, "  %s: %s\n", s.Session, termText(s.Error))
		}
	}
	if kept > 0 && !branches {
		fmt.Fprintf(w, "%d %s with commits kept; %s prune --older-than %s --branches deletes %s\n",
			kept, pluralOf(kept, "branch", "branches"), c.self(), age, pluralOf(kept, "it", "them"))
	}
	if len(failed) > 0 {
		return fmt.Errorf("prune: %d of %d sessions could not be pruned", len(failed), len(res.Sessions))
	}
	return nil
}

// branchFate says in words what pruning did (or, dry, would do) to a
// session's branch, and whether a branch with work was kept.
func (c *cli) branchFate(b pool.BranchPrune, dry bool) (string, bool) {
	deleted := "deleted"
	if dry {
		deleted = "would be deleted"
	}
	switch {
	case b.RepoMissing:
		return "repository gone", false
	case b.Head == "":
		return "no branch left", false
	case b.Deleted && b.Merged:
		return fmt.Sprintf("branch %s %s: merged, head %s (git branch %s %s brings it back)",
			b.Name, deleted, short(b.Head), b.Name, short(b.Head)), false
	case b.Deleted && b.Commits == 0:
		return fmt.Sprintf("branch %s %s (no commits)", b.Name, deleted), false
	case b.Deleted:
		return fmt.Sprintf("branch %s %s: %d %s, head %s (git branch %s %s brings it back)",
			b.Name, deleted, b.Commits, pluralOf(b.Commits, "commit", "commits"), short(b.Head), b.Name, short(b.Head)), false
	case b.Commits > 0:
		return fmt.Sprintf("branch %s kept: %d %s, head %s (%s)", b.Name, b.Commits, pluralOf(b.Commits, "commit", "commits"), short(b.Head), b.Kept), true
	}
	return fmt.Sprintf("branch %s kept (%s)", b.Name, b.Kept), false
}

// pluralOf picks the singular or plural form for n.
func pluralOf(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
