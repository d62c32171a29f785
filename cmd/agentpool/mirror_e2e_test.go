package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/worktree"
)

// TestEndToEndRepositoryByURL: a session made from a shared bare
// repository given by file:// URL (through the API) and by its path
// (through the CLI): the daemon mirrors it in its home, the agent works in
// a worktree of the mirror, each checkpoint is pushed to the shared
// repository with the session's branch, and session merge pushes the
// merge to the shared repository's main.
func TestEndToEndRepositoryByURL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	src := e2eRepoAt(t, filepath.Join(t.TempDir(), "src"), map[string]string{
		"README.md":       "# shared project\n",
		".gitignore":      "setup-ran.txt\n",
		".agentpool.json": `{"copy": [".env"], "setup": {"command": ["sh", "-c", "echo ran > setup-ran.txt"]}}`,
	})
	shared := filepath.Join(t.TempDir(), "shared.git")
	e2eGit(t, src, "init", "-q", "--bare", "-b", "main", shared)
	e2eGit(t, src, "push", "-q", shared, "main")
	url := "file://" + shared

	d := startDaemon(t, bin, home)
	defer func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Kill()
			_ = d.cmd.Wait()
		}
	}()
	ctx := context.Background()
	if out, err := d.cli("trust", "--yes", url); err != nil {
		t.Fatalf("trust --yes %s: %v\n%s", url, err, out)
	}
	sess, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: url, Agent: "demo"})
	if err != nil {
		t.Fatalf("POST /v1/sessions {repo: %q}: %v\ndaemon log:\n%s", url, err, d.out)
	}
	id := sess.ID
	if sess.Repo != url || !strings.HasPrefix(sess.Worktree.Path, home) {
		t.Errorf("session = repo %q, worktree %q; want repo %q, a worktree in the daemon's home", sess.Repo, sess.Worktree.Path, url)
	}
	mirrors := filepath.Join(home, "mirrors")
	if fi, err := os.Stat(mirrors); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("mirrors directory: %v, %v; want mode 0700", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(sess.Worktree.Path, "README.md")); err != nil || string(b) != "# shared project\n" {
		t.Errorf("worktree README.md = %q, %v; want the shared repository's", b, err)
	}

	// No main checkout to copy from: the copy is refused; the trusted
	// setup command still runs.
	if ev := d.waitEvent(id, "setup.copied"); !strings.Contains(string(ev.Data), "no main checkout to copy from") {
		t.Errorf("setup.copied = %s; want the copy refused", ev.Data)
	}
	if ev := d.waitEvent(id, "setup.ended"); !strings.Contains(string(ev.Data), `"ok":true`) {
		t.Errorf("setup.ended = %s; want ok", ev.Data)
	}
	if b, err := os.ReadFile(filepath.Join(sess.Worktree.Path, "setup-ran.txt")); err != nil || string(b) != "ran\n" {
		t.Errorf("setup-ran.txt = %q, %v; want the setup command run", b, err)
	}

	// The agent works; the turn's checkpoint and the branch are pushed.
	d.promptApproved(id, "add a greeting")
	ref := worktree.CheckpointRefPrefix + id
	if got := e2eGit(t, shared, "show", ref+":"+agenttest.DemoFile); !strings.Contains(got, "add a greeting") {
		t.Errorf("shared %s:%s = %q; want the agent's work pushed", ref, agenttest.DemoFile, got)
	}
	if got := strings.TrimSpace(e2eGit(t, shared, "rev-parse", "refs/heads/agentpool/"+id)); got != sess.Worktree.BaseCommit {
		t.Errorf("shared agentpool/%s = %s; want the branch pushed at its base %s", id, got, sess.Worktree.BaseCommit)
	}

	// Merge: no main checkout; the merge goes to the shared main.
	out, err := d.cli("session", "merge", id)
	if err != nil {
		t.Fatalf("session merge: %v\n%s\ndaemon log:\n%s", err, out, d.out)
	}
	if !strings.Contains(out, "merged agentpool/"+id+" into main (fast-forward)") {
		t.Errorf("session merge output:\n%s", out)
	}
	if got := e2eGit(t, shared, "show", "main:"+agenttest.DemoFile); !strings.Contains(got, "add a greeting") {
		t.Errorf("shared main:%s = %q; want the merged work", agenttest.DemoFile, got)
	}
	if got, want := e2eGit(t, shared, "rev-parse", "main"), e2eGit(t, shared, "rev-parse", "refs/heads/agentpool/"+id); got != want {
		t.Errorf("shared main = %s; want the session branch %s (fast-forward, branch pushed with it)", got, want)
	}

	// The same through the CLI with the bare repository's path.
	id2 := d.newSession(shared)
	s2, err := d.client.Session(ctx, id2)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Repo != shared {
		t.Errorf("session new --repo %s: repo %q", shared, s2.Repo)
	}
	if b, err := os.ReadFile(filepath.Join(s2.Worktree.Path, agenttest.DemoFile)); err != nil || !strings.Contains(string(b), "add a greeting") {
		t.Errorf("second session's %s = %q, %v; want the merged work, fetched before the session was made", agenttest.DemoFile, b, err)
	}
	d.promptApproved(id2, "say more")
	if got := e2eGit(t, shared, "show", worktree.CheckpointRefPrefix+id2+":"+agenttest.DemoFile); !strings.Contains(got, "say more") {
		t.Errorf("shared checkpoint of %s = %q; want the agent's work pushed", id2, got)
	}

	// After a restart the daemon finds the session's worktree in its
	// mirror again, and pushes the next turn's checkpoint.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("daemon stop: %v\n%s", err, d.out)
	}
	d = startDaemon(t, bin, home)
	d.promptApproved(id2, "after a restart")
	if got := e2eGit(t, shared, "show", worktree.CheckpointRefPrefix+id2+":"+agenttest.DemoFile); !strings.Contains(got, "after a restart") {
		t.Errorf("shared checkpoint of %s after a restart = %q; want the agent's work pushed\ndaemon log:\n%s", id2, got, d.out)
	}

	// Closing commits the work to the session's branch, pushed too.
	if out, err := d.cli("session", "close", id2); err != nil {
		t.Fatalf("session close: %v\n%s", err, out)
	}
	if got := e2eGit(t, shared, "show", "refs/heads/agentpool/"+id2+":"+agenttest.DemoFile); !strings.Contains(got, "after a restart") {
		t.Errorf("shared agentpool/%s:%s = %q; want the work committed at close, pushed", id2, agenttest.DemoFile, got)
	}

	// session new takes the URL too.
	if out, err := d.cli("session", "new", "--repo", url, "--agent", "demo", "--no-warm"); err != nil || !strings.Contains(out, "created") {
		t.Errorf("session new --repo %s: %v\n%s", url, err, out)
	}

	// A URL that could run a program is refused.
	if _, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: "ext::sh -c touch% /tmp/x", Agent: "demo"}); err == nil || !strings.Contains(err.Error(), "transport helpers") {
		t.Errorf("POST /v1/sessions {repo: ext::...} error = %v; want refused", err)
	}
}

// TestConfinementOfURLSession: an agent of a session made from a
// repository given by URL works in a worktree of the daemon's mirror: it
// can commit on its branch, but it can write neither the mirror's config,
// HEAD or hooks nor the shared repository itself; its commit reaches the
// shared repository by the daemon's push only.
func TestConfinementOfURLSession(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	f := newConfineFixture(t)
	shared := filepath.Join(filepath.Dir(f.repo), "shared.git")
	e2eGit(t, f.repo, "init", "-q", "--bare", "-b", "main", shared)
	e2eGit(t, f.repo, "push", "-q", shared, "main")
	f.writeProvider(t, agenttest.Script{})
	d := f.start(t)
	waitProviderReady(t, d, "hostile")
	url := "file://" + shared
	// The session is made first (with an agent that does nothing), so that
	// the mirror's path is known to the script of the next turn.
	sess, err := d.client.CreateSession(context.Background(), pool.CreateRequest{Repo: url, Agent: "hostile", Warm: new(bool)})
	if err != nil {
		t.Fatalf("create session of %s: %v\ndaemon log:\n%s", url, err, d.out)
	}
	mirrors, err := filepath.Glob(filepath.Join(f.home, "mirrors", "*.git"))
	if err != nil || len(mirrors) != 1 {
		t.Fatalf("mirrors = %v, %v; want one", mirrors, err)
	}
	mirror := mirrors[0]
	steps := []agenttest.Step{
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: "inside.txt", Content: "mine"}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: filepath.Join(mirror, "config"), Content: "[core]\n\tfsmonitor = touch /tmp/pwned\n"}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: filepath.Join(mirror, "HEAD"), Content: "ref: refs/heads/evil\n"}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: filepath.Join(mirror, "hooks"), Content: "#!/bin/sh\n"}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: filepath.Join(shared, "config"), Content: "[core]\n"}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: filepath.Join(shared, "refs", "heads", "main"), Content: "0000000000000000000000000000000000000000\n"}),
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", "git add inside.txt && git commit -q -m 'agent commit' && git log -1 --format=%s"}}),
	}
	// The mirror is the worktree's common git directory, read-only in the
	// agent's view (EROFS); the shared repository is not in it (ENOENT).
	wants := []struct{ op, status, detail string }{
		{"write", "ok", ""}, {"write", "EROFS", ""}, {"write", "EROFS", ""}, {"write", "EROFS", ""},
		{"write", "ENOENT", ""}, {"write", "ENOENT", ""}, {"exec", "ok", "exit=0 agent commit"},
	}
	before := map[string]string{}
	for _, p := range []string{filepath.Join(mirror, "config"), filepath.Join(mirror, "HEAD"), filepath.Join(shared, "config"), filepath.Join(shared, "refs", "heads", "main")} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		before[p] = string(b)
	}
	f.writeProvider(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: steps}}})
	waitProviderReady(t, d, "hostile")
	got := results(t, d, sess.ID)
	if len(got) != len(wants) {
		t.Fatalf("%d sys results %v; want %d\ndaemon log:\n%s", len(got), got, len(wants), d.out)
	}
	for i, w := range wants {
		if got[i].Op != w.op || got[i].Status != w.status || (w.detail != "" && !strings.HasPrefix(got[i].Detail, w.detail)) {
			t.Errorf("step %d: %s %s %q; want %s %s %q", i, got[i].Op, got[i].Status, got[i].Detail, w.op, w.status, w.detail)
		}
	}
	for p, want := range before {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want it unchanged, %q", p, b, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(mirror, "hooks")); err == nil && !fi.IsDir() {
		t.Errorf("the agent wrote the mirror's hooks: %v", fi.Mode())
	}
	if log := e2eGit(t, shared, "log", "-1", "--format=%s", "agentpool/"+sess.ID); strings.TrimSpace(log) != "agent commit" {
		t.Errorf("shared branch head = %q; want the agent's commit, pushed by the daemon", log)
	}
}
