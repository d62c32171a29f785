package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// cliEnv runs the binary as a client of this daemon with env added.
func (d *daemon) cliEnv(env []string, args ...string) (string, error) {
	cmd := exec.Command(d.bin, args...)
	cmd.Env = append(append(os.Environ(), "AGENTPOOL_HOME="+d.home), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fakeGH writes a gh on a directory of its own that records each call's
// arguments (one per line, then "--") in log, answers auth status with
// authStatus, and prints a pull request URL for pr create.
func fakeGH(t *testing.T, log string, authStatus int) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
for a in "$@"; do printf '%s\n' "$a" >> "` + log + `"; done
echo -- >> "` + log + `"
if [ "$1" = auth ]; then exit ` + string(rune('0'+authStatus)) + `; fi
echo "Creating pull request for agentpool branch"
echo "https://github.com/o/r/pull/7"
`
	if err := os.WriteFile(filepath.Join(dir, "gh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEndToEndPushAndPR pushes a session's branch to a bare repository
// with session push (its uncommitted work committed first), opens a pull
// request with a fake gh that records its arguments, and records, shows
// and lists the URL; without a logged-in gh, session pr prints the forge's
// compare page.
func TestEndToEndPushAndPR(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	d, repo, bare, sess := pushSession(t)
	ctx := context.Background()
	branch := sess.Worktree.Branch

	out, err := d.cliEnv(e2eGitEnv, "session", "push", sess.ID, "--remote", "nowhere")
	if err == nil || !strings.Contains(out, `no remote "nowhere"`) {
		t.Errorf("session push --remote nowhere = %v:\n%s\nwant a refusal naming the remote", err, out)
	}
	out, err = d.cliEnv(e2eGitEnv, "session", "push", sess.ID)
	if err != nil {
		t.Fatalf("session push: %v\n%s", err, out)
	}
	if !strings.Contains(out, "committed the session's uncommitted work to "+branch) || !strings.Contains(out, "pushed "+branch+" to origin") {
		t.Errorf("session push output:\n%s", out)
	}
	if got := e2eGit(t, bare, "show", "refs/heads/"+branch+":a.go"); !strings.Contains(got, "line 5 by the agent") {
		t.Errorf("pushed a.go = %q; want the agent's work", got)
	}

	// gh installed and logged in: pr create with the session's title and
	// body, the URL recorded.
	log := filepath.Join(t.TempDir(), "gh.log")
	ghDir := fakeGH(t, log, 0)
	path := "PATH=" + ghDir + string(os.PathListSeparator) + os.Getenv("PATH")
	out, err = d.cliEnv(append(e2eGitEnv, path), "session", "pr", sess.ID, "--draft")
	if err != nil {
		t.Fatalf("session pr: %v\n%s", err, out)
	}
	if !strings.Contains(out, "pull request https://github.com/o/r/pull/7 recorded on session "+sess.ID) {
		t.Errorf("session pr output:\n%s", out)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	calls := strings.Split(strings.TrimSuffix(string(b), "--\n"), "--\n")
	if len(calls) != 2 || calls[0] != "auth\nstatus\n" {
		t.Fatalf("gh calls = %q; want auth status, then pr create", calls)
	}
	args := strings.Split(calls[1], "\n")
	flag := func(name string) string {
		for i, a := range args {
			if a == name && i+1 < len(args) {
				return args[i+1]
			}
		}
		return ""
	}
	if args[0] != "pr" || args[1] != "create" || flag("--head") != branch || flag("--base") != "main" || flag("--title") != "number lines" || !strings.Contains(calls[1], "--draft\n") {
		t.Errorf("gh pr create args = %q; want --head %s --base main --title %q --draft", args, branch, "number lines")
	}
	for _, w := range []string{"change some lines", "changed lines 5 and 15", "a.go"} {
		if !strings.Contains(calls[1], w) {
			t.Errorf("pull request body lacks %q:\n%s", w, calls[1])
		}
	}
	out, err = d.cli("session", "show", sess.ID)
	if err != nil || !strings.Contains(out, "pull request  https://github.com/o/r/pull/7") {
		t.Errorf("session show = %v:\n%s\nwant the pull request", err, out)
	}
	out, err = d.cli("session", "list", "--json")
	if err != nil || !strings.Contains(out, `"pr_url": "https://github.com/o/r/pull/7"`) {
		t.Errorf("session list --json = %v:\n%s\nwant pr_url", err, out)
	}

	// No logged-in gh: the compare page of the forge behind the remote
	// (pushing still goes to the bare repository, its push URL).
	e2eGit(t, repo, "remote", "set-url", "origin", "git@github.com:o/r.git")
	e2eGit(t, repo, "remote", "set-url", "--push", "origin", bare)
	out, err = d.cliEnv(append(e2eGitEnv, "PATH="+fakeGH(t, log, 1)+string(os.PathListSeparator)+os.Getenv("PATH")), "session", "pr", sess.ID)
	// It opened no pull request: it fails, having said what to do.
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("session pr without gh error = %v; want exit status 1 (no pull request opened)\n%s", err, out)
	}
	if !strings.Contains(out, "https://github.com/o/r/compare/main..."+branch+"?") ||
		!strings.Contains(out, "session pr "+sess.ID+" --url URL") {
		t.Errorf("session pr without gh output:\n%s\nwant the compare URL and how to record the PR", out)
	}

	// The API refuses what is not an http(s) URL, and forgets with "".
	_, err = d.client.SetSessionPR(ctx, sess.ID, "javascript:alert(1)")
	var ae *httpapi.Error
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "url" {
		t.Errorf("SetSessionPR(javascript:) error = %v; want 400 naming url", err)
	}
	if s, err := d.client.SetSessionPR(ctx, sess.ID, ""); err != nil || s.PRURL != "" {
		t.Errorf("SetSessionPR(\"\") = %q, %v; want it forgotten", s.PRURL, err)
	}
}

// pushSession starts the daemon with the review agent, on a repository
// whose origin is a bare repository, and returns a session after one
// turn that changed lines, with the repository and the bare remote.
func pushSession(t *testing.T) (d *daemon, repo, bare string, sess pool.Session) {
	t.Helper()
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeReviewAgent(t, home, bin, reviewScript())
	repo = e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"a.go": reviewFile(nil)})
	bare = filepath.Join(t.TempDir(), "origin.git")
	e2eGit(t, filepath.Dir(bare), "init", "-q", "--bare", bare)
	e2eGit(t, repo, "remote", "add", "origin", bare)
	d = startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	sess, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "rev", Title: "number lines"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.Prompt(ctx, sess.ID, "", "change some lines", true); err != nil {
		t.Fatal(err)
	}
	return d, repo, bare, sess
}
