package main

import (
	"context"
	"fmt"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// sessionMergeUsage is the synopsis and description of session merge.
const sessionMergeUsage = `session merge SESSION [--into BRANCH] [--squash] [--rebase] [--json]

Merges the session's branch into its base (the branch it was created from)
or --into BRANCH, in the main repository. The session's uncommitted work is
committed to its branch first. Nothing is changed when the merge would
conflict (the conflicting paths are listed) or when the branch is checked
out in a checkout with uncommitted changes; a branch checked out in the
main checkout is updated there with git merge, its hooks included.

--rebase instead brings the session's branch up to date with its base (or
--into BRANCH), merging it into the session's worktree; on a conflict
nothing changes.`

// sessionMerge runs `session merge`.
func (c *cli) sessionMerge(ctx context.Context, args []string) error {
	fs := c.flagSet("session merge", sessionMergeUsage)
	into := fs.String("into", "", "the local branch to merge into (default: the session's base)")
	squash := fs.Bool("squash", false, "make one commit summarising the session (its prompts) instead of a merge")
	rebase := fs.Bool("rebase", false, "bring the session's branch up to date with its base instead")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *squash && *rebase {
		return fmt.Errorf("session merge: --squash and --rebase do not go together")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	target := "its base"
	if *into != "" {
		target = *into
	}
	if *rebase {
		c.progress("bringing session %s up to date with %s… ", pos[0], target)
	} else {
		c.progress("merging session %s into %s… ", pos[0], target)
	}
	res, err := api.MergeSession(ctx, pos[0], httpapi.MergeRequest{Into: *into, Squash: *squash, Rebase: *rebase})
	if err != nil {
		c.progress("refused\n")
		return err
	}
	c.progress("done\n")
	if *asJSON {
		return c.printJSON(res)
	}
	c.renderMerge(res)
	return nil
}

// renderMerge prints what a merge did.
func (c *cli) renderMerge(r pool.MergeResult) {
	if r.Committed {
		fmt.Fprintf(c.stdout, "the session's uncommitted work was committed to %s first (%s)\n", r.Branch, short(r.WorkCommit))
	}
	from, to := r.Branch, r.Into
	if r.Rebase {
		from, to = r.Into, r.Branch
	}
	if r.Method == "up-to-date" {
		fmt.Fprintf(c.stdout, "nothing to merge: %s already has everything of %s (%s at %s)\n", to, from, to, short(r.Head))
		return
	}
	fmt.Fprintf(c.stdout, "merged %s into %s (%s): %s %s → %s\n", from, to, r.Method, to, short(r.Before), short(r.Head))
	if r.WorkingTree != "" {
		fmt.Fprintf(c.stdout, "  files updated in %s\n", r.WorkingTree)
	} else {
		fmt.Fprintf(c.stdout, "  %s is not checked out: only the branch moved\n", to)
	}
	n := len(r.Commits) + r.MoreCommits
	if n == 0 {
		return
	}
	fmt.Fprintf(c.stdout, "  %d commit%s from %s:\n", n, plural(n), from)
	for _, cm := range r.Commits {
		fmt.Fprintf(c.stdout, "    %s %s\n", short(cm.ID), oneLine(cm.Subject, 72))
	}
	if r.MoreCommits > 0 {
		fmt.Fprintf(c.stdout, "    … and %d more\n", r.MoreCommits)
	}
}
