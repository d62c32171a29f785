package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// TestEndToEndCopiedFilesMergeAndPrune: a trusted setup copies an
// untracked secret.env into the worktree; the session's turns, its squash
// merge and its close never commit it, its diff names it as copied only,
// the work is authored as the repository's user with trailers naming the
// session and agent, and prune deletes the branch that was merged.
func TestEndToEndCopiedFilesMergeAndPrune(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{
		"README.md":       "# project\n",
		".agentpool.json": `{"copy": ["secret.env"]}`,
	})
	e2eGit(t, repo, "config", "user.name", "Jane Doe")
	e2eGit(t, repo, "config", "user.email", "jane@example.com")
	if err := os.WriteFile(filepath.Join(repo, "secret.env"), []byte("TOKEN=hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, bin, home)
	defer func() {
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
	}()
	if out, err := d.cli("trust", "--yes", repo); err != nil {
		t.Fatalf("trust --yes: %v\n%s", err, out)
	}
	id := d.newSession(repo)
	d.waitEvent(id, "setup.ended")
	sess, err := d.client.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(sess.Worktree.Path, "secret.env")); err != nil || string(b) != "TOKEN=hunter2\n" {
		t.Fatalf("secret.env in the worktree = %q, %v; want the copy", b, err)
	}

	d.promptApproved(id, "add a greeting")
	out, err := d.cli("diff", id)
	if err != nil {
		t.Fatalf("diff: %v\n%s", err, out)
	}
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "secret.env  (copied)") || !strings.Contains(out, agenttest.DemoFile) {
		t.Errorf("diff output:\n%s\nwant the agent's work, and secret.env named as copied without its content", out)
	}

	out, err = d.cli("session", "merge", "--squash", id)
	if err != nil {
		t.Fatalf("session merge --squash: %v\n%s", err, out)
	}
	branch := "agentpool/" + id
	for _, rev := range []string{"main", branch} {
		files := e2eGit(t, repo, "ls-tree", "-r", "--name-only", rev)
		if strings.Contains(files, "secret.env") || !strings.Contains(files, agenttest.DemoFile) {
			t.Errorf("%s holds:\n%s\nwant the agent's work and no secret.env", rev, files)
		}
	}
	head := strings.TrimSpace(e2eGit(t, repo, "rev-parse", branch))
	if got := strings.TrimSpace(e2eGit(t, repo, "log", "-1", "--format=%an <%ae>", head)); got != "Jane Doe <jane@example.com>" {
		t.Errorf("the session's work commit is authored by %q; want the repository's user", got)
	}
	trailers := e2eGit(t, repo, "log", "-1", "--format=%(trailers:key=Agentpool-Session,key=Agentpool-Agent,only)", head)
	if want := "Agentpool-Session: " + id + "\nAgentpool-Agent: demo"; strings.TrimSpace(trailers) != want {
		t.Errorf("the work commit's trailers = %q; want %q", trailers, want)
	}

	if out, err := d.cli("session", "close", id); err != nil {
		t.Fatalf("session close: %v\n%s", err, out)
	}
	if log := e2eGit(t, repo, "log", "--all", "--format=%H", "--", "secret.env"); log != "" {
		t.Errorf("commits touching secret.env: %s; want none", log)
	}
	out, err = d.cli("prune", "--older-than", "0")
	if err != nil {
		t.Fatalf("prune: %v\n%s", err, out)
	}
	if !strings.Contains(out, "branch "+branch+" deleted: merged") {
		t.Errorf("prune output:\n%s\nwant the merged branch deleted", out)
	}
	if got := strings.TrimSpace(e2eGit(t, repo, "branch", "--list", branch)); got != "" {
		t.Errorf("branch %s after prune: %q; want it deleted", branch, got)
	}
}
