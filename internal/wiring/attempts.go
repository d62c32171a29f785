package wiring

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentpool/agentpool/attempts"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/worktree"
)

// AttemptsGit adapts *worktree.Manager to attempts.Git.
type AttemptsGit struct{ M *worktree.Manager }

var _ attempts.Git = AttemptsGit{}

// ResolveBase implements attempts.Git.
func (a AttemptsGit) ResolveBase(ctx context.Context, repo, base string) (string, string, error) {
	return a.M.ResolveBase(ctx, repo, base)
}

// RunCheck implements attempts.Git: the check runs confined like a
// trusted setup command of the worktree.
func (a AttemptsGit) RunCheck(ctx context.Context, wt pool.Worktree, command string, timeout time.Duration) attempts.CheckOutcome {
	w := worktree.Worktree{Session: wt.Session, Repo: wt.Repo, Path: wt.Path, Branch: wt.Branch, BaseCommit: wt.BaseCommit, CreatedAt: wt.CreatedAt}
	r := a.M.RunCheck(ctx, w, wt.Repo, command, timeout)
	out := attempts.CheckOutcome{ExitCode: r.ExitCode, Output: r.Output, Error: r.Error}
	if c := r.Confinement; c != nil {
		var parts []string
		if c.Containment != "" {
			parts = append(parts, c.Containment)
		}
		if c.Landlock > 0 {
			parts = append(parts, fmt.Sprintf("landlock ABI %d", c.Landlock))
		}
		if c.Network != "" {
			parts = append(parts, "network "+c.Network)
		}
		if c.Warning != "" {
			parts = append(parts, c.Warning)
		}
		out.Confined = strings.Join(parts, "; ")
	}
	return out
}
