package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// waitEvent polls a session's event log until an event of type typ
// arrives, and returns it.
func (d *daemon) waitEvent(session string, typ backends.EventType) backends.Event {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		evs, err := d.client.EventLog(context.Background(), session, 0)
		if err != nil {
			d.t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == typ {
				return ev
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("no %s event in session %s; daemon log:\n%s", typ, session, d.out)
	return backends.Event{}
}

// newSession runs `agentpool session new` on repo and returns the id.
func (d *daemon) newSession(repo string) string {
	d.t.Helper()
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "demo")
	if err != nil {
		d.t.Fatalf("session new: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`session (\S+) created`).FindStringSubmatch(out)
	if m == nil {
		d.t.Fatalf("session new output has no id:\n%s", out)
	}
	return m[1]
}

// TestEndToEndSetupAndMerge sets up worktrees from .agentpool.json, in a
// directory chosen for worktrees, and finishes sessions with session
// merge: a fast-forward into the checked-out base, a rebase, and a
// conflict that is refused without touching anything.
func TestEndToEndSetupAndMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	worktrees := filepath.Join(t.TempDir(), "trees")
	write := func(dir, name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{
		"README.md":       "# project\n",
		".gitignore":      ".env\ndeps/\n",
		".agentpool.json": `{"copy": [".env"], "setup": {"command": ["sh", "-c", "echo installing; mkdir -p deps; cp .env deps/installed"], "timeout": "1m"}}`,
	})
	write(repo, ".env", "SECRET=1\n")

	d := startDaemon(t, bin, home, "AGENTPOOL_WORKTREES="+worktrees)
	defer func() {
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
	}()
	if out, err := d.cli("trust", "--yes", repo); err != nil {
		t.Fatalf("trust --yes: %v\n%s", err, out)
	}
	id := d.newSession(repo)
	sess, err := d.client.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sess.Worktree.Path, worktrees+string(filepath.Separator)) {
		t.Errorf("worktree at %s; want it under --worktrees %s", sess.Worktree.Path, worktrees)
	}
	ended := d.waitEvent(id, "setup.ended")
	var end struct {
		OK       bool `json:"ok"`
		ExitCode *int `json:"exit_code"`
	}
	if err := json.Unmarshal(ended.Data, &end); err != nil || !end.OK || end.ExitCode == nil || *end.ExitCode != 0 {
		t.Fatalf("setup.ended = %s; want ok, exit 0", ended.Data)
	}
	if out := d.waitEvent(id, "setup.output"); !strings.Contains(string(out.Data), "installing") {
		t.Errorf("setup.output = %s", out.Data)
	}
	if b, err := os.ReadFile(filepath.Join(sess.Worktree.Path, "deps", "installed")); err != nil || string(b) != "SECRET=1\n" {
		t.Errorf("setup's work in the worktree = %q, %v; want the copied .env", b, err)
	}

	// The agent works; the session is merged into its base, checked out here.
	d.promptApproved(id, "add a greeting")
	out, err := d.cli("session", "merge", id)
	if err != nil {
		t.Fatalf("session merge: %v\n%s", err, out)
	}
	t.Logf("merge:\n%s", out)
	if !strings.Contains(out, "merged agentpool/"+id+" into main (fast-forward)") || !strings.Contains(out, "files updated in "+repo) {
		t.Errorf("session merge output:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(repo, agenttest.DemoFile)); err != nil || !strings.Contains(string(b), "add a greeting") {
		t.Errorf("main checkout's %s = %q, %v; want the agent's work", agenttest.DemoFile, b, err)
	}
	if st := e2eGit(t, repo, "status", "--porcelain", "--untracked-files=no"); st != "" {
		t.Errorf("main checkout status after the merge = %q", st)
	}
	if msg := e2eGit(t, repo, "log", "-1", "--format=%B", "main"); !strings.Contains(msg, "- add a greeting") {
		t.Errorf("main's new commit does not list the session's prompts:\n%s", msg)
	}
	d.waitEvent(id, "session.merged")

	// A second session falls behind main and is brought up to date.
	id2 := d.newSession(repo)
	s2, err := d.client.Session(context.Background(), id2)
	if err != nil {
		t.Fatal(err)
	}
	d.waitEvent(id2, "setup.ended")
	write(s2.Worktree.Path, "notes.txt", "the agent's notes\n")
	write(repo, "main.txt", "moved on\n")
	e2eGit(t, repo, "add", "main.txt")
	e2eGit(t, repo, "commit", "-q", "-m", "main moves on")
	if out, err := d.cli("session", "merge", id2, "--rebase"); err != nil || !strings.Contains(out, "merged main into agentpool/"+id2+" (merge)") {
		t.Fatalf("session merge --rebase: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(s2.Worktree.Path, "main.txt")); err != nil {
		t.Errorf("the rebase did not bring main.txt into the worktree: %v", err)
	}

	// A conflict is refused, naming the path; nothing moves.
	write(s2.Worktree.Path, "README.md", "# the agent's title\n")
	write(repo, "README.md", "# the user's title\n")
	e2eGit(t, repo, "commit", "-q", "-am", "retitle")
	mainBefore := e2eGit(t, repo, "rev-parse", "main")
	branchBefore := e2eGit(t, repo, "rev-parse", "agentpool/"+id2)
	out, err = d.cli("session", "merge", id2)
	t.Logf("refused merge:\n%s", out)
	if err == nil || !strings.Contains(out, "conflict") || !strings.Contains(out, "README.md") || !strings.Contains(out, "nothing was changed") {
		t.Errorf("session merge of a conflicting session: %v\n%s", err, out)
	}
	if e2eGit(t, repo, "rev-parse", "main") != mainBefore || e2eGit(t, repo, "rev-parse", "agentpool/"+id2) != branchBefore {
		t.Error("a refused merge moved a branch")
	}
	if b, _ := os.ReadFile(filepath.Join(s2.Worktree.Path, "README.md")); string(b) != "# the agent's title\n" {
		t.Errorf("a refused merge changed the worktree: README.md = %q", b)
	}

	// An invalid setup file refuses new sessions, saying where.
	write(repo, ".agentpool.json", "{\n  \"copy\": \".env\"\n}\n")
	out, err = d.cli("session", "new", "--repo", repo, "--agent", "demo")
	if err == nil || !strings.Contains(out, ".agentpool.json") || !strings.Contains(out, "line 2") {
		t.Errorf("session new with an invalid setup file: %v\n%s", err, out)
	}
}
