package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/agentpool/agentpool/worktree"
)

// uncommitted counts the changes of the checkout at repo that a new
// worktree does not get: tracked files changed (staged or not) and
// untracked files that are not ignored. ok is false when git cannot tell
// (a daemon's repository this client cannot read, say).
func uncommitted(ctx context.Context, repo string) (tracked, untracked int, ok bool) {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "status", "--porcelain", "-z", "--untracked-files=normal").Output()
	if err != nil {
		return 0, 0, false
	}
	entries := strings.Split(string(out), "\x00")
	for i := 0; i < len(entries); i++ {
		e := entries[i]
		if len(e) < 3 {
			continue
		}
		switch {
		case strings.HasPrefix(e, "??"):
			untracked++
		default:
			tracked++
			if e[0] == 'R' || e[0] == 'C' {
				i++ // the rename's or copy's source follows
			}
		}
	}
	return tracked, untracked, true
}

// noteUncommitted tells, after a session was created from repo's base,
// that the main checkout's uncommitted changes are not in its worktree.
// A repository given by URL has no checkout to look at.
func (c *cli) noteUncommitted(ctx context.Context, w io.Writer, repo, base, commit string) {
	if worktree.IsURL(repo) {
		return
	}
	tracked, untracked, ok := uncommitted(ctx, repo)
	if !ok || tracked+untracked == 0 {
		return
	}
	if base == "" {
		base = "HEAD"
	}
	var what []string
	if tracked > 0 {
		what = append(what, fmt.Sprintf("%d changed %s", tracked, pluralOf(tracked, "file", "files")))
	}
	if untracked > 0 {
		what = append(what, fmt.Sprintf("%d untracked %s", untracked, pluralOf(untracked, "file", "files")))
	}
	fmt.Fprintf(w, "\nnote: your uncommitted changes in %s (%s) are not in the session's worktree: it starts from %s %.7s.\n"+
		"  Commit them first for the agent to see them (or list untracked files it needs in .agentpool.json's \"copy\").\n",
		repo, strings.Join(what, ", "), base, commit)
}
