package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/agentpool/agentpool/pool"
)

// sessionPushUsage is the synopsis and description of session push.
const sessionPushUsage = `session push SESSION [--remote origin] [--no-commit]

Pushes the session's branch to a remote of your repository with your own
git, in your environment (your SSH agent, your credential helper): the
daemon never pushes. The session's uncommitted work is committed to its
branch first by the daemon (not the files its setup copied in; this client
never runs git in the agent's worktree), unless --no-commit; a session
running a turn is refused.`

// sessionPRUsage is the synopsis and description of session pr.
const sessionPRUsage = `session pr SESSION [--remote origin] [--base BRANCH] [--title T] [--draft] [--no-push]
session pr SESSION --url URL

Opens a pull request for the session's branch: pushes it (as session push,
unless --no-push), then runs gh pr create when gh is installed and logged
in (gh auth status), with a title (--title, else the session's title, else
its first prompt) and a body made of the session's prompts, the agent's
last answer and the diff stat. The pull request's URL is recorded on the
session (session show, the page). Without gh, it prints the forge's page
to open the pull request on (GitHub, GitLab, Bitbucket); record its URL
afterwards with --url; the exit status is then 1, as no pull request was
opened. --url "" forgets the recorded URL.`

// maxPRBody bounds the pull request body made from the session, in bytes.
const maxPRBody = 12 << 10

// sessionPush runs `session push`.
func (c *cli) sessionPush(ctx context.Context, args []string) error {
	fs := c.flagSet("session push", sessionPushUsage)
	remote := fs.String("remote", "origin", "the `REMOTE` of your repository to push to")
	noCommit := fs.Bool("no-commit", false, "push the branch as it is, leaving uncommitted work out")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	s, err := api.Session(ctx, pos[0])
	if err != nil {
		return err
	}
	return c.pushSession(ctx, s, *remote, !*noCommit)
}

// pushSession commits the session's uncommitted work (when commit) and
// pushes its branch to remote, with the user's git in the user's
// repository.
func (c *cli) pushSession(ctx context.Context, s pool.Session, remote string, commit bool) error {
	branch := s.Worktree.Branch
	if branch == "" {
		return fmt.Errorf("session %s has no branch to push", s.ID)
	}
	if _, err := gitOut(ctx, s.Repo, "remote", "get-url", "--push", "--", remote); err != nil {
		return fmt.Errorf("%s has no remote %q (git -C %s remote -v lists them; --remote picks one)", s.Repo, remote, s.Repo)
	}
	if _, err := gitOut(ctx, s.Repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch); err != nil {
		return fmt.Errorf("session %s: its branch %s is gone from %s (closed with --discard, or deleted)", s.ID, branch, s.Repo)
	}
	if s.Status == pool.StatusOpen && s.Worktree.Path != "" {
		switch {
		case !commit:
			fmt.Fprintf(c.stderr, "note: work left uncommitted in the session's worktree is not pushed (--no-commit)\n")
		case s.Busy:
			return fmt.Errorf("session %s is running turn %d; push it when the turn has ended (or --no-commit to push the branch as it is)", s.ID, s.Turn)
		default:
			if err := c.commitWork(ctx, s); err != nil {
				return err
			}
		}
	}
	c.progress("pushing %s to %s…\n", branch, remote)
	cmd := exec.CommandContext(ctx, "git", "-C", s.Repo, "push", "--", remote, "refs/heads/"+branch+":refs/heads/"+branch)
	cmd.Stdout, cmd.Stderr = c.stdout, c.stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git push %s %s: %w", remote, branch, err)
	}
	fmt.Fprintf(c.stdout, "pushed %s to %s\n", branch, remote)
	return nil
}

// commitWork has the daemon commit the session's uncommitted work (not
// the files its setup copied in) to its branch. The daemon's git is
// hardened; the client never runs git in the worktree, whose git files
// its agent can write.
func (c *cli) commitWork(ctx context.Context, s pool.Session) error {
	api, err := c.client()
	if err != nil {
		return err
	}
	res, err := api.CommitWork(ctx, s.ID)
	if err != nil {
		return fmt.Errorf("commit the session's work: %w", err)
	}
	if res.Committed {
		fmt.Fprintf(c.stdout, "committed the session's uncommitted work to %s (%s)\n", res.Branch, short(res.Head))
	}
	return nil
}

// gitOut runs git in dir and returns its trimmed output; an error
// carries git's message.
func gitOut(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", fmt.Errorf("git %s: %s: %w", args[0], msg, err)
		}
		return "", fmt.Errorf("git %s: %w", args[0], err)
	}
	return strings.TrimSpace(string(out)), nil
}

// sessionPR runs `session pr`.
func (c *cli) sessionPR(ctx context.Context, args []string) error {
	fs := c.flagSet("session pr", sessionPRUsage)
	remote := fs.String("remote", "origin", "the `REMOTE` of your repository to push to")
	base := fs.String("base", "", "the `BRANCH` to merge into (default: the session's base branch)")
	title := fs.String("title", "", "the pull request's `TITLE`")
	draft := fs.Bool("draft", false, "open it as a draft")
	noPush := fs.Bool("no-push", false, "do not push first")
	var record optString
	fs.Var(&record, "url", "record this pull request `URL` on the session, and do nothing else")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	if record.set {
		s, err := api.SetSessionPR(ctx, pos[0], record.v)
		if err != nil {
			return err
		}
		if s.PRURL == "" {
			fmt.Fprintf(c.stdout, "session %s: pull request forgotten\n", s.ID)
		} else {
			fmt.Fprintf(c.stdout, "session %s: pull request %s\n", s.ID, s.PRURL)
		}
		return nil
	}
	s, err := api.Session(ctx, pos[0])
	if err != nil {
		return err
	}
	if !*noPush {
		if err := c.pushSession(ctx, s, *remote, true); err != nil {
			return err
		}
	}
	into := *base
	if into == "" {
		into = baseBranch(ctx, s, *remote)
	}
	turns, err := api.Turns(ctx, s.ID)
	if err != nil {
		return err
	}
	d, err := api.Diff(ctx, s.ID, 0)
	if err != nil {
		return err
	}
	replies := map[int64]string{}
	if evs, err := api.EventLog(ctx, s.ID, 0); err == nil {
		replies = turnReplies(evs)
	}
	t := *title
	if t == "" {
		t = prTitle(s, turns)
	}
	body := prBody(s, turns, replies, d)
	if ghReady(ctx) {
		ghArgs := []string{"pr", "create", "--head", s.Worktree.Branch, "--title", t, "--body", body}
		if into != "" {
			ghArgs = append(ghArgs, "--base", into)
		}
		if *draft {
			ghArgs = append(ghArgs, "--draft")
		}
		cmd := exec.CommandContext(ctx, "gh", ghArgs...)
		cmd.Dir = s.Repo
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, c.stdout), c.stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("gh pr create: %w", err)
		}
		u := lastURL(out.String())
		if u == "" {
			return errors.New("gh pr create printed no pull request URL; record it with: " + c.self() + " session pr " + s.ID + " --url URL")
		}
		if _, err := api.SetSessionPR(ctx, s.ID, u); err != nil {
			return fmt.Errorf("record the pull request %s: %w", u, err)
		}
		fmt.Fprintf(c.stdout, "pull request %s recorded on session %s\n", u, s.ID)
		return nil
	}
	rawURL, _ := gitOut(ctx, s.Repo, "remote", "get-url", "--", *remote)
	cmp, err := compareURL(rawURL, s.Worktree.Branch, into, t, body)
	if err != nil {
		fmt.Fprintf(c.stdout, "gh is not installed or not logged in (gh auth login), and %v:\nopen a pull request there for branch %s", err, s.Worktree.Branch)
		if into != "" {
			fmt.Fprintf(c.stdout, " into %s", into)
		}
		fmt.Fprintln(c.stdout)
	} else {
		fmt.Fprintf(c.stdout, "gh is not installed or not logged in (gh auth login); open the pull request here:\n  %s\n", cmp)
	}
	fmt.Fprintf(c.stdout, "then record its URL on the session: %s session pr %s --url URL\n", c.self(), s.ID)
	// No pull request was opened: a script must not take this for success.
	return exitError(1)
}

// optString is a string flag that knows whether it was given.
type optString struct {
	v   string
	set bool
}

func (o *optString) String() string     { return o.v }
func (o *optString) Set(v string) error { o.v, o.set = v, true; return nil }

// ghReady says whether gh is on PATH and logged in.
func ghReady(ctx context.Context) bool {
	if _, err := exec.LookPath("gh"); err != nil {
		return false
	}
	return exec.CommandContext(ctx, "gh", "auth", "status").Run() == nil
}

// lastURL returns the last http(s) URL on a line of its own in out.
func lastURL(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if (strings.HasPrefix(l, "https://") || strings.HasPrefix(l, "http://")) && !strings.ContainsAny(l, " \t") {
			return l
		}
	}
	return ""
}

// baseBranch is the branch a session's pull request goes into: its base
// when that is a local branch, else the remote's default branch, else the
// branch checked out in the main checkout; "" when none is known.
func baseBranch(ctx context.Context, s pool.Session, remote string) string {
	if s.BaseRef != "" {
		if _, err := gitOut(ctx, s.Repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+s.BaseRef); err == nil {
			return s.BaseRef
		}
	}
	if ref, err := gitOut(ctx, s.Repo, "symbolic-ref", "--quiet", "refs/remotes/"+remote+"/HEAD"); err == nil {
		return strings.TrimPrefix(ref, "refs/remotes/"+remote+"/")
	}
	if b, err := gitOut(ctx, s.Repo, "symbolic-ref", "--quiet", "--short", "HEAD"); err == nil {
		return b
	}
	return ""
}
