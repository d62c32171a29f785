package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The agent can write its worktree, and with it the `.git` file that says
// where the worktree's git directory is. session push must not run git
// there as the user (unconfined): an agent that points `.git` at a
// repository of its own, whose configuration names a program (fsmonitor,
// hooks), never gets it run; the work still reaches the remote, committed
// by the daemon's hardened git.
func TestSessionPushNeverRunsTheWorktreesGit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	d, _, bare, sess := pushSession(t)
	// What a hostile agent plants: a repository of its own in the
	// worktree, with a program to run, and `.git` pointing at it.
	wt := sess.Worktree.Path
	marker := filepath.Join(t.TempDir(), "ran")
	evil := filepath.Join(wt, ".evil")
	e2eGit(t, wt, "init", "-q", evil)
	e2eGit(t, evil, "-c", "user.name=a", "-c", "user.email=a@example.com", "commit", "-q", "--allow-empty", "-m", "evil")
	prog := filepath.Join(evil, "prog.sh")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\ntouch "+marker+"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e2eGit(t, evil, "config", "core.fsmonitor", prog)
	e2eGit(t, evil, "config", "core.hooksPath", evil)
	for _, h := range []string{"pre-commit", "post-commit", "pre-push", "reference-transaction"} {
		if err := os.Symlink(prog, filepath.Join(evil, h)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: "+filepath.Join(evil, ".git")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := d.cliEnv(e2eGitEnv, "session", "push", sess.ID)
	if _, serr := os.Stat(marker); serr == nil {
		t.Fatalf("session push ran the agent's program (as the user, unconfined):\n%s", out)
	}
	if err != nil {
		t.Fatalf("session push: %v\n%s", err, out)
	}
	if got := e2eGit(t, bare, "show", "refs/heads/"+sess.Worktree.Branch+":a.go"); !strings.Contains(got, "line 5 by the agent") {
		t.Errorf("pushed a.go = %q; want the agent's work", got)
	}
}
