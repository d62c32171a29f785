package main

import (
	"bytes"

	"context"
	"github.com/agentpool/agentpool/backends"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// spareScript is the demo agent with a slow start (initialize answered
// after initDelay ms) and a turn that answers one chunk.
func spareScript(initDelay int) agenttest.Script {
	return agenttest.Script{AgentName: "spare-demo", InitDelayMs: initDelay,
		Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "first token\n"}}}}}
}

// waitSpares polls GET /v1/pool until match accepts its spares.
func (d *daemon) waitSpares(what string, match func([]pool.SpareStatus) bool) []pool.SpareStatus {
	d.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var last httpapi.PoolStatus
	for time.Now().Before(deadline) {
		st, err := d.client.Pool(context.Background())
		if err != nil {
			d.t.Fatal(err)
		}
		last = st
		if match(st.Spares) {
			return st.Spares
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("spares never %s; last: %+v\ndaemon log:\n%s", what, last.Spares, d.out)
	return nil
}

func readySpares(n int, base string) func([]pool.SpareStatus) bool {
	return func(sp []pool.SpareStatus) bool {
		ready := 0
		for _, s := range sp {
			if s.State == "ready" && (base == "" || s.Base == base) {
				ready++
			}
		}
		return ready == n && len(sp) == n
	}
}

func spareGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestEndToEndSpares runs the daemon with a spare per repository for the
// demo agent: a session created on that repository adopts it (its agent
// already started, its setup already run), the spare is replenished,
// spares on an old base or under a setup whose trust changed are
// discarded, and a daemon killed with spares leaves nothing once it has
// started again.
func TestEndToEndSpares(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	worktrees := filepath.Join(t.TempDir(), "trees")
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{
		"README.md":       "# project\n",
		".agentpool.json": `{"setup": {"command": ["sh", "-c", "echo prepared > .prepared"], "timeout": "1m"}}`,
		".gitignore":      ".prepared\n",
	})
	writeScripted(t, home, bin, map[string]any{"slow": spareScript(300)})
	env := []string{"AGENTPOOL_WORKTREES=" + worktrees, "AGENTPOOL_SPARES=slow=1", "AGENTPOOL_SPARES_REPOS=" + repo}
	d := startDaemon(t, bin, home, env...)
	killed := false
	defer func() {
		if !killed {
			_ = d.cmd.Process.Kill()
			_ = d.cmd.Wait()
		}
	}()
	if out, err := d.cli("trust", "--yes", repo); err != nil {
		t.Fatalf("trust --yes: %v\n%s", err, out)
	}
	head := spareGit(t, repo, "rev-parse", "HEAD")
	// A spare made before the trust was given skipped the setup: it is
	// replaced by one whose setup ran ahead.
	first := d.waitSpares("ready with the trusted setup run", func(sp []pool.SpareStatus) bool {
		if !readySpares(1, head)(sp) {
			return false
		}
		_, err := os.Stat(filepath.Join(sp[0].Worktree, ".prepared"))
		return err == nil
	})[0]
	if !strings.HasPrefix(first.ID, pool.SpareIDPrefix) {
		t.Errorf("spare id %q; want the prefix %q", first.ID, pool.SpareIDPrefix)
	}

	t.Log("first spare ready")
	// Adoption: the session is the spare, its agent already running.
	ctx := context.Background()
	sess, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "slow", Title: "adopted"})
	if err != nil {
		t.Fatal(err)
	}
	if sess.ID != first.ID || sess.Worktree.Path != first.Worktree {
		t.Fatalf("session %s at %s; want the spare %s at %s adopted", sess.ID, sess.Worktree.Path, first.ID, first.Worktree)
	}
	if sess.Title != "adopted" || sess.Worktree.Branch == "" || sess.Worktree.BaseCommit != head {
		t.Errorf("adopted session = %+v", sess)
	}
	running := false
	for _, a := range sess.Agents {
		running = running || (a.Agent == "slow" && a.State == pool.StateIdle && a.PID > 0 && !a.Spare)
	}
	if !running {
		t.Errorf("adopted session's agents = %+v; want slow idle, running, not a spare", sess.Agents)
	}
	d.waitEvent(sess.ID, pool.EventSpareAdopted)
	d.waitEvent(sess.ID, "setup.ended")
	turn, err := d.client.Prompt(ctx, sess.ID, "", "hello", true)
	if err != nil || turn.StopReason != "end_turn" {
		t.Fatalf("prompt on the adopted session = %+v, %v", turn, err)
	}
	// A session asking for its own id does not adopt.
	own, err := d.client.CreateSession(ctx, pool.CreateRequest{ID: "own-id", Repo: repo, Agent: "slow"})
	if err != nil || own.ID != "own-id" {
		t.Fatalf("session with its own id = %+v, %v", own, err)
	}

	t.Log("adopted")
	// Replenished.
	second := d.waitSpares("replenished", readySpares(1, head))[0]
	if second.ID == first.ID {
		t.Fatalf("spare not replaced: %+v", second)
	}

	t.Log("replenished")
	// Created with its first prompt in one request answered as its
	// stream: the spare is adopted with its turn 1, whose agent works
	// while the rows commit; the stream starts at session.created, and
	// the turn's token comes after its turn.started, then its end.
	var created httpapi.CreatedSession
	var types []backends.EventType
	if _, err := d.client.CreateStream(ctx, httpapi.CreateSessionRequest{CreateRequest: pool.CreateRequest{Repo: repo, Agent: "slow"}, Prompt: "go"},
		func(cs httpapi.CreatedSession) error { created = cs; return nil },
		func(ev backends.Event) error {
			types = append(types, ev.Type)
			if ev.Type == backends.EventTurnEnded {
				return httpapi.ErrStop
			}
			return nil
		}); err != nil {
		t.Fatalf("create with a prompt, streamed: %v (events %v)", err, types)
	}
	if created.ID != second.ID || created.FirstTurn == nil || created.FirstTurn.ID != 1 || created.FirstTurnError != nil {
		t.Fatalf("created %s, first turn %+v (%v); want the spare %s adopted with turn 1", created.ID, created.FirstTurn, created.FirstTurnError, second.ID)
	}
	started, chunk := slices.Index(types, backends.EventTurnStarted), slices.Index(types, backends.EventMessageChunk)
	if len(types) == 0 || types[0] != backends.EventSessionCreated || started < 0 || chunk < started {
		t.Errorf("stream of the session created with its prompt = %v; want session.created first, the token after turn.started", types)
	}
	if turns, err := d.client.Turns(ctx, created.ID); err != nil || len(turns) != 1 || turns[0].StopReason != "end_turn" {
		t.Errorf("turns of the session created with its prompt = %+v, %v; want turn 1 ended", turns, err)
	}
	second = d.waitSpares("replenished after an adoption with a prompt", readySpares(1, head))[0]
	if second.ID == created.ID {
		t.Fatalf("spare not replaced: %+v", second)
	}
	// The base moves: the spare is thrown away, one at the new head comes.
	if err := os.WriteFile(filepath.Join(repo, "new.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spareGit(t, repo, "add", "new.txt")
	spareGit(t, repo, "commit", "-q", "-m", "move the base")
	moved := spareGit(t, repo, "rev-parse", "HEAD")
	third := d.waitSpares("at the new head", readySpares(1, moved))[0]
	if _, err := os.Stat(second.Worktree); !os.IsNotExist(err) {
		t.Errorf("the spare on the old base left its worktree %s: %v", second.Worktree, err)
	}
	if br := spareGit(t, repo, "branch", "--list", "*"+second.ID); br != "" {
		t.Errorf("the spare on the old base left its branch: %q", br)
	}

	t.Log("base moved")
	// The setup file changes (not trusted as it is now): the spare goes.
	if err := os.WriteFile(filepath.Join(repo, ".agentpool.json"), []byte(`{"setup": {"command": ["true"]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fourth := d.waitSpares("remade under the new setup", func(sp []pool.SpareStatus) bool {
		return len(sp) == 1 && sp[0].ID != third.ID && sp[0].State == "ready"
	})[0]
	if _, err := os.Stat(third.Worktree); !os.IsNotExist(err) {
		t.Errorf("the spare under the old setup left its worktree %s: %v", third.Worktree, err)
	}

	t.Log("setup changed")
	// Killed with a spare: the next daemon removes it at start.
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	_ = d.cmd.Wait()
	killed = true
	if _, err := os.Stat(fourth.Worktree); err != nil {
		t.Fatalf("the killed daemon's spare is not on disk (the test checks nothing): %v", err)
	}
	d2 := startDaemon(t, bin, home, "AGENTPOOL_WORKTREES="+worktrees)
	defer func() {
		_ = d2.cmd.Process.Kill()
		_ = d2.cmd.Wait()
	}()
	if _, err := os.Stat(fourth.Worktree); !os.IsNotExist(err) {
		t.Errorf("the killed daemon's spare %s is still there: %v\n%s", fourth.Worktree, err, d2.out)
	}
	if br := spareGit(t, repo, "branch", "--list", "*"+fourth.ID); br != "" {
		t.Errorf("the killed daemon's spare left its branch: %q", br)
	}
	if _, err := os.Stat(sess.Worktree.Path); err != nil {
		t.Errorf("the adopted session's worktree went with the spares: %v", err)
	}
}

// startDaemonArgs is startDaemon with extra serve arguments.
func startDaemonArgs(t *testing.T, bin, home string, args []string, env ...string) *daemon {
	t.Helper()
	_ = os.Remove(filepath.Join(home, daemonFileName))
	d := &daemon{t: t, bin: bin, home: home, out: &bytes.Buffer{}}
	d.cmd = exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--log-level", "debug"}, args...)...)
	d.cmd.Env = append(append(os.Environ(), "AGENTPOOL_HOME="+home, "XDG_STATE_HOME="+t.TempDir()), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	t.Cleanup(func() { removeCgroupTree(home) })
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.connect(d.out)
	d.stopAtCleanup()
	return d
}

// TestEndToEndSparesEvictedFirst fills both backend slots with spares:
// a new session's warm-up and then another session's prompt each take a
// spare's slot, while the idle agent of the first session keeps running.
func TestEndToEndSparesEvictedFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# project\n"})
	writeScripted(t, home, bin, map[string]any{"slow": spareScript(100)})
	d := startDaemonArgs(t, bin, home, []string{"--max-warm", "2", "--spares", "slow=2", "--spares-repo", repo},
		"AGENTPOOL_WORKTREES="+filepath.Join(t.TempDir(), "trees"))
	head := spareGit(t, repo, "rev-parse", "HEAD")
	spares := d.waitSpares("ready", readySpares(2, head))
	ctx := context.Background()
	if out, err := d.cli("ps"); err != nil || strings.Count(out, "idle (spare)") != 2 {
		t.Errorf("ps = %v\n%s\nwant both spares marked", err, out)
	}

	// A session that does not adopt (it names its id): its warm-up takes
	// a spare's slot instead of being skipped.
	one, err := d.client.CreateSession(ctx, pool.CreateRequest{ID: "own-1", Repo: repo, Agent: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	d.waitEvent(one.ID, backends.EventAgentReady)
	left := d.waitSpares("down to one", func(sp []pool.SpareStatus) bool { return len(sp) == 1 })
	if left[0].ID != spares[0].ID && left[0].ID != spares[1].ID {
		t.Fatalf("spares = %+v; want one of %+v left, none made (no free slot)", left, spares)
	}
	// A prompt of a session without warm-up takes the last spare's slot,
	// not the idle agent of own-1.
	warm := false
	two, err := d.client.CreateSession(ctx, pool.CreateRequest{ID: "own-2", Repo: repo, Agent: "slow", Warm: &warm})
	if err != nil {
		t.Fatal(err)
	}
	if turn, err := d.client.Prompt(ctx, two.ID, "", "hi", true); err != nil || turn.StopReason != "end_turn" {
		t.Fatalf("prompt = %+v, %v", turn, err)
	}
	st, err := d.client.Pool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	running := map[string]bool{}
	for _, b := range st.Backends {
		if b.State != pool.StateStopping {
			running[b.Session] = true
		}
	}
	if !running["own-1"] || !running["own-2"] || len(st.Spares) != 0 {
		t.Errorf("backends %+v, spares %+v; want own-1 and own-2 running and no spare", st.Backends, st.Spares)
	}
	if _, err := os.Stat(left[0].Worktree); !os.IsNotExist(err) {
		t.Errorf("the evicted spare's worktree %s is still there: %v", left[0].Worktree, err)
	}
}
