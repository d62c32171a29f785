package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// maxCompareQuery bounds the title and body carried in a compare URL,
// which browsers and forges cut when too long.
const maxCompareQuery = 4000

// turnReplies returns the agent's text of each turn, from a session's
// events.
func turnReplies(evs []backends.Event) map[int64]string {
	out := map[int64]string{}
	for _, ev := range evs {
		if ev.Type != backends.EventMessageChunk || ev.Turn == 0 {
			continue
		}
		var c backends.ChunkData
		if json.Unmarshal(ev.Data, &c) == nil && c.Role == backends.RoleAgent {
			out[ev.Turn] += c.Text
		}
	}
	return out
}

// prTitle is a session's title, or the first line of its first prompt.
func prTitle(s pool.Session, turns []pool.Turn) string {
	if t := strings.TrimSpace(s.Title); t != "" {
		return t
	}
	for _, t := range turns {
		if line := strings.TrimSpace(strings.SplitN(strings.TrimSpace(t.Prompt), "\n", 2)[0]); line != "" {
			return oneLine(line, 72)
		}
	}
	return "Work of agentpool session " + s.ID
}

// prBody describes a session for its pull request: its prompts, the
// agent's last answer and the diff stat, bounded to maxPRBody.
func prBody(s pool.Session, turns []pool.Turn, replies map[int64]string, d pool.Diff) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Made with agentpool (session `%s`, branch `%s`).\n", s.ID, s.Worktree.Branch)
	if len(turns) > 0 {
		b.WriteString("\n## Prompts\n\n")
		for _, t := range turns {
			p := strings.TrimSpace(t.Prompt)
			if t.Review != nil {
				p = fmt.Sprintf("Review with %d comments", len(t.Review.Comments))
			}
			fmt.Fprintf(&b, "%d. (%s) %s\n", t.ID, t.Agent, oneLine(p, 200))
		}
		last := turns[len(turns)-1]
		if r := strings.TrimSpace(replies[last.ID]); r != "" {
			if len(r) > maxPRBody/2 {
				r = r[:maxPRBody/2] + " …"
			}
			b.WriteString("\n## Summary (the agent's last answer)\n\n" + r + "\n")
		}
	}
	if len(d.Files) > 0 {
		fmt.Fprintf(&b, "\n## Changes\n\n%d files changed, +%d −%d\n\n", d.Stat.Files, d.Stat.Additions, d.Stat.Deletions)
		for _, f := range d.Files {
			fmt.Fprintf(&b, "- `%s` (%s, +%d −%d)\n", f.Path, f.Status, f.Additions, f.Deletions)
		}
	}
	out := b.String()
	if len(out) > maxPRBody {
		out = out[:maxPRBody] + "\n…\n"
	}
	return out
}

// compareURL is the page of the forge behind remote where a pull (or
// merge) request of branch into base ("": the forge's default) is opened,
// with title and body filled in where the forge takes them. Remotes may be
// https (https://host/owner/repo.git), ssh URLs (ssh://git@host[:port]/owner/repo)
// or scp-like (git@host:owner/repo.git). An unknown forge is an error.
func compareURL(remote, branch, base, title, body string) (string, error) {
	host, path, err := remoteHostPath(remote)
	if err != nil {
		return "", err
	}
	web := "https://" + host + "/" + path
	q := url.Values{}
	switch {
	case strings.Contains(host, "github"):
		q.Set("expand", "1")
		q.Set("title", title)
		if len(body) < maxCompareQuery {
			q.Set("body", body)
		}
		rng := refPath(branch)
		if base != "" {
			rng = refPath(base) + "..." + rng
		}
		return web + "/compare/" + rng + "?" + q.Encode(), nil
	case strings.Contains(host, "gitlab"):
		q.Set("merge_request[source_branch]", branch)
		if base != "" {
			q.Set("merge_request[target_branch]", base)
		}
		q.Set("merge_request[title]", title)
		if len(body) < maxCompareQuery {
			q.Set("merge_request[description]", body)
		}
		return web + "/-/merge_requests/new?" + q.Encode(), nil
	case strings.Contains(host, "bitbucket"):
		q.Set("source", branch)
		if base != "" {
			q.Set("dest", base)
		}
		return web + "/pull-requests/new?" + q.Encode(), nil
	}
	return "", fmt.Errorf("agentpool does not know the forge at %s (GitHub, GitLab and Bitbucket it does)", host)
}

// remoteHostPath reads a git remote URL into its web host (without a
// port, user or ssh. prefix) and repository path (without .git).
func remoteHostPath(remote string) (host, path string, err error) {
	r := strings.TrimSpace(remote)
	switch {
	case strings.Contains(r, "://"):
		u, perr := url.Parse(r)
		if perr != nil || u.Host == "" {
			return "", "", fmt.Errorf("the remote %q is not a URL agentpool can read", remote)
		}
		if u.Scheme == "file" {
			return "", "", fmt.Errorf("the remote %q is a local repository, not a forge", remote)
		}
		host, path = u.Hostname(), u.Path
	case strings.Contains(r, ":") && !strings.HasPrefix(r, "/") && !strings.HasPrefix(r, "."):
		h, p, _ := strings.Cut(r, ":")
		if i := strings.LastIndexByte(h, '@'); i >= 0 {
			h = h[i+1:]
		}
		host, path = h, p
	default:
		return "", "", fmt.Errorf("the remote %q is a local repository, not a forge", remote)
	}
	host = strings.TrimPrefix(strings.ToLower(host), "ssh.")
	path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	if host == "" || path == "" || !strings.Contains(path, "/") {
		return "", "", fmt.Errorf("the remote %q names no owner/repository on a forge", remote)
	}
	return host, path, nil
}

// refPath escapes a branch name for a URL path, keeping its slashes.
func refPath(ref string) string {
	parts := strings.Split(ref, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}
