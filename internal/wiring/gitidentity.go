package wiring

import (
	"context"
	"strconv"
	"strings"

	"github.com/agentpool/agentpool/worktree"
)

// Agents get the user's git identity in their environment, as git's
// command-line configuration (GIT_CONFIG_COUNT, GIT_CONFIG_KEY_n,
// GIT_CONFIG_VALUE_n), which takes precedence over every file: a tool that
// writes user.name into .git/config when `git config --get user.name`
// finds none (aider, through GitPython) would otherwise fail on the
// configuration confinement keeps read-only, and the files that give the
// identity (~/.gitconfig) may be out of the agent's reach.

// identityEnv returns the entries to append to env (the environment they
// follow, where the last entry of a name wins) so that git sees id as
// user.name and user.email. Entries that env's own GIT_CONFIG_* already
// set are kept, and nothing is added when env's GIT_CONFIG_COUNT is not a
// number (git would refuse it either way).
func identityEnv(env []string, id worktree.Identity) []string {
	vals := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "GIT_CONFIG_") {
			vals[k] = v
		}
	}
	n := 0
	if c, ok := vals["GIT_CONFIG_COUNT"]; ok {
		var err error
		if n, err = strconv.Atoi(strings.TrimSpace(c)); err != nil || n < 0 {
			return nil
		}
	}
	set := map[string]bool{}
	for i := range n {
		set[strings.ToLower(vals["GIT_CONFIG_KEY_"+strconv.Itoa(i)])] = true
	}
	var out []string
	for _, kv := range [][2]string{{"user.name", id.Name}, {"user.email", id.Email}} {
		if set[kv[0]] || kv[1] == "" {
			continue
		}
		i := strconv.Itoa(n)
		out = append(out, "GIT_CONFIG_KEY_"+i+"="+kv[0], "GIT_CONFIG_VALUE_"+i+"="+kv[1])
		n++
	}
	if out == nil {
		return nil
	}
	return append(out, "GIT_CONFIG_COUNT="+strconv.Itoa(n))
}

// identityOf returns the git identity of repo through lookup, bounded in
// time; the zero Identity when there is no lookup or no repository.
func identityOf(lookup func(ctx context.Context, repo string) worktree.Identity, repo string) worktree.Identity {
	if lookup == nil || repo == "" {
		return worktree.Identity{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), gitLookupTimeout)
	defer cancel()
	return lookup(ctx, repo)
}
