package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path"
	"strings"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/worktree"
)

// setupFileName is the repository's setup file, which the daemon reads
// from the main checkout: a worktree does not need a copy of it.
const setupFileName = ".agentpool.json"

// maxNamed is how many untracked files the note about uncommitted
// changes names.
const maxNamed = 5

// uncommitted reports the changes of the checkout at repo that a new
// worktree does not get: how many tracked files changed (staged or not),
// and the untracked files that are not ignored (a directory whose files
// are all untracked as one "dir/"). ok is false when git cannot tell (a
// daemon's repository this client cannot read, say).
func uncommitted(ctx context.Context, repo string) (tracked int, untracked []string, ok bool) {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "status", "--porcelain", "-z", "--untracked-files=normal").Output()
	if err != nil {
		return 0, nil, false
	}
	entries := strings.Split(string(out), "\x00")
	for i := 0; i < len(entries); i++ {
		e := entries[i]
		if len(e) < 3 {
			continue
		}
		switch {
		case strings.HasPrefix(e, "??"):
			untracked = append(untracked, e[3:])
		default:
			tracked++
			if e[0] == 'R' || e[0] == 'C' {
				i++ // the rename's or copy's source follows
			}
		}
	}
	return tracked, untracked, true
}

// notCopied returns the untracked files that a trusted setup file's copy
// list does not bring into new worktrees, leaving out the setup file
// itself. A copy entry covers the file it names and, when a directory,
// everything under it.
func notCopied(untracked []string, sf httpapi.SetupFile, haveSetup bool) []string {
	var out []string
	for _, u := range untracked {
		clean := strings.TrimSuffix(u, "/")
		if clean == setupFileName {
			continue
		}
		covered := false
		if haveSetup && sf.Trusted {
			for _, c := range sf.Copy {
				c = strings.TrimSuffix(path.Clean(c), "/")
				if clean == c || strings.HasPrefix(clean, c+"/") {
					covered = true
					break
				}
			}
		}
		if !covered {
			out = append(out, u)
		}
	}
	return out
}

// noteUncommitted tells, after a session was created from repo's base,
// that the main checkout's uncommitted changes are not in its worktree:
// how many tracked files changed, and by name the untracked files that
// the setup does not copy. A repository given by URL has no checkout to
// look at.
func (c *cli) noteUncommitted(ctx context.Context, api *httpapi.Client, w io.Writer, repo, base, commit string) {
	if worktree.IsURL(repo) {
		return
	}
	tracked, untracked, ok := uncommitted(ctx, repo)
	if !ok {
		return
	}
	var sf httpapi.SetupFile
	haveSetup := false
	if len(untracked) > 0 {
		var err error
		sf, err = api.SetupFile(ctx, repo)
		haveSetup = err == nil
	}
	left := notCopied(untracked, sf, haveSetup)
	if tracked+len(left) == 0 {
		return
	}
	if base == "" {
		base = "HEAD"
	}
	var what []string
	if tracked > 0 {
		what = append(what, fmt.Sprintf("%d changed %s", tracked, pluralOf(tracked, "file", "files")))
	}
	if len(left) > 0 {
		names := make([]string, 0, maxNamed)
		for _, n := range left[:min(len(left), maxNamed)] {
			names = append(names, termLine(n))
		}
		list := strings.Join(names, ", ")
		if len(left) > maxNamed {
			list += fmt.Sprintf(" and %d more", len(left)-maxNamed)
		}
		what = append(what, fmt.Sprintf("%d untracked %s not copied: %s", len(left), pluralOf(len(left), "file", "files"), list))
	}
	hint := "Commit them first for the agent to see them."
	if len(left) > 0 {
		hint = "Commit them first for the agent to see them (or list the untracked files it needs in .agentpool.json's \"copy\")."
	}
	fmt.Fprintf(w, "\nnote: your uncommitted changes in %s (%s) are not in the session's worktree: it starts from %s %.7s.\n  %s\n",
		repo, strings.Join(what, "; "), base, commit, hint)
}
