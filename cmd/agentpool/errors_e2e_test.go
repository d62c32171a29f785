package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// TestEndToEndErrorsSayWhatIsWrong: the daemon's errors a new user meets
// first say what is wrong and what to do, in the CLI and in the API's
// message (which the page shows), without the steps and git commands that
// found them.
func TestEndToEndErrorsSayWhatIsWrong(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	leaks := []string{"rev-parse", "exit status", "create worktree", "invalid request", "get session", "not found: "}
	check := func(what, out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s = %q; want it to say %q", what, out, w)
			}
		}
		for _, l := range leaks {
			if strings.Contains(out, l) {
				t.Errorf("%s = %q; want no %q in it", what, out, l)
			}
		}
	}
	apiMessage := func(err error) string {
		var ae *httpapi.Error
		if !errors.As(err, &ae) {
			t.Fatalf("error %v is not an API error", err)
		}
		return ae.Message
	}

	plain := t.TempDir()
	out, err := d.cli("session", "new", "--repo", plain)
	if err == nil {
		t.Fatalf("session new in a plain directory succeeded:\n%s", out)
	}
	want := plain + " is not a git repository (git init, or pick a repository)"
	check("session new --repo (not a repository)", out, want)
	_, err = d.client.CreateSession(t.Context(), pool.CreateRequest{Repo: plain, Agent: "demo"})
	if msg := apiMessage(err); msg != want {
		t.Errorf("API message for a directory that is not a repository = %q; want %q", msg, want)
	}

	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	e2eGit(t, empty, "init", "-q", "-b", "main")
	out, err = d.cli("session", "new", "--repo", empty)
	if err == nil {
		t.Fatalf("session new in a repository without commits succeeded:\n%s", out)
	}
	check("session new in a repository without commits", out, "has no commit yet: commit something first (git commit --allow-empty -m init)")

	out, err = d.cli("session", "show", "s-NOPE")
	if err == nil {
		t.Fatalf("session show s-NOPE succeeded:\n%s", out)
	}
	check("session show s-NOPE", out, "no session s-NOPE")
	_, err = d.client.Session(t.Context(), "s-NOPE")
	if msg := apiMessage(err); msg != "no session s-NOPE" {
		t.Errorf("API message for an unknown session = %q; want %q", msg, "no session s-NOPE")
	}

	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"a.txt": "a\n"})
	if _, err := exec.LookPath("claude-agent-acp"); err == nil {
		t.Log("claude-agent-acp is installed here: the not-installed case is not checked")
		return
	}
	out, err = d.cli("session", "new", "--repo", repo, "--agent", "claude")
	if err == nil {
		t.Fatalf("session new --agent claude without it installed succeeded:\n%s", out)
	}
	check("session new --agent claude (not installed)", out, "agent claude is not installed", "npm install -g @agentclientprotocol/claude-agent-acp", "--agent demo")
	if strings.Contains(out, "worktree") {
		t.Errorf("session new --agent claude (not installed) = %q; want the agent blamed, not the worktree step", out)
	}
}

// TestEndToEndSessionNewNotesUncommittedChanges: session new says when the
// main checkout has changes the new worktree does not have, and from which
// commit it starts; a clean checkout gets no note.
func TestEndToEndSessionNewNotesUncommittedChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	d := startDaemon(t, bin, t.TempDir())
	d.stopAtCleanup()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	head := strings.TrimSpace(e2eGit(t, repo, "rev-parse", "HEAD"))

	out, err := d.cli("session", "new", "--repo", repo, "--no-warm")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	if strings.Contains(out, "uncommitted") {
		t.Errorf("session new on a clean checkout = %q; want no note of uncommitted changes", out)
	}

	if err := os.WriteFile(filepath.Join(repo, "a.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "new.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = d.cli("session", "new", "--repo", repo, "--no-warm")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	top, _ := filepath.EvalSymlinks(repo)
	want := "your uncommitted changes in " + top + " (1 changed file; 1 untracked file not copied: new.txt) are not in the session's worktree: it starts from HEAD " + head[:7]
	if !strings.Contains(out, want) {
		t.Errorf("session new on a dirty checkout =\n%s\nwant it to say %q", out, want)
	}

	// A trusted setup file that copies .env: .env is in the worktree, the
	// setup file is the daemon's; only new.txt is left behind, and said.
	e2eGit(t, repo, "checkout", "--", "a.txt")
	for name, content := range map[string]string{".env": "KEY=1\n", ".agentpool.json": `{"copy": [".env"]}` + "\n"} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := d.cli("trust", "--yes", repo); err != nil {
		t.Fatalf("trust: %v\n%s", err, out)
	}
	out, err = d.cli("session", "new", "--repo", repo, "--no-warm")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	want = "(1 untracked file not copied: new.txt)"
	if !strings.Contains(out, want) || strings.Contains(out, ".env") {
		t.Errorf("session new with .env copied =\n%s\nwant it to say %q and not name .env", out, want)
	}
}
