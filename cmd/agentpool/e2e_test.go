package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/agentpool/agentpool/backends/sandbox"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// agentpoolBinary builds the real binary once for the end-to-end tests.
func agentpoolBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agentpool-e2e-bin-*")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "agentpool")
		buildErr = buildBinary(builtBin)
	})
	if buildErr != nil {
		t.Fatalf("build agentpool: %v", buildErr)
	}
	return builtBin
}

// buildBinary builds the agentpool binary at path, and beside it the
// launcher binary, as make build does.
func buildBinary(path string) error {
	out, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput()
	if err != nil {
		return &buildFailure{err, string(out)}
	}
	out, err = exec.Command("go", "build", "-o", filepath.Join(filepath.Dir(path), sandbox.LauncherBinary), "../agentpool-sandbox").CombinedOutput()
	if err != nil {
		return &buildFailure{err, string(out)}
	}
	return nil
}

type buildFailure struct {
	err error
	out string
}

func (b *buildFailure) Error() string { return b.err.Error() + "\n" + b.out }

var e2eGitEnv = []string{"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
	"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com"}

func e2eGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), e2eGitEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// daemon is a running `agentpool serve`.
type daemon struct {
	t      *testing.T
	bin    string
	home   string
	cmd    *exec.Cmd
	out    *bytes.Buffer
	client *httpapi.Client
}

// startDaemon starts `agentpool serve` on home, with env added to the
// environment of the daemon only (not of its CLI clients).
func startDaemon(t *testing.T, bin, home string, env ...string) *daemon {
	t.Helper()
	_ = os.Remove(filepath.Join(home, daemonFileName))
	d := &daemon{t: t, bin: bin, home: home, out: &bytes.Buffer{}}
	addr := "127.0.0.1:0" // AGENTPOOL_LISTEN in env chooses another
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "AGENTPOOL_LISTEN="); ok {
			addr = v
		}
	}
	d.cmd = exec.Command(bin, "serve", "--addr", addr, "--log-level", "debug")
	// The per-user pointer (see writePointer) goes to the test's own state
	// directory, unless env says otherwise.
	d.cmd.Env = append(append(os.Environ(), "AGENTPOOL_HOME="+home, "XDG_STATE_HOME="+t.TempDir()), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	t.Cleanup(func() { removeCgroupTree(home) })
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.connect(d.out)
	return d
}

// connect waits until the started daemon has written its daemon.json in
// d.home, then makes d.client with the home's token; out is the daemon's
// output, shown when it does not start within 20 s.
func (d *daemon) connect(out fmt.Stringer) {
	d.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var info daemonInfo
	for {
		b, err := os.ReadFile(filepath.Join(d.home, daemonFileName))
		if err == nil && json.Unmarshal(b, &info) == nil && info.PID == d.cmd.Process.Pid {
			break
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("daemon did not start with data in %s:\n%s", d.home, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	token, err := os.ReadFile(filepath.Join(d.home, tokenFileName))
	if err != nil {
		d.t.Fatal(err)
	}
	d.client = &httpapi.Client{BaseURL: "http://" + info.Addr, Token: strings.TrimSpace(string(token))}
	if info.Cert != "" {
		hc, err := trustingClient(info.Cert)
		if err != nil {
			d.t.Fatal(err)
		}
		d.client.BaseURL, d.client.HTTP = info.Addr, hc
	}
}

// removeCgroupTree removes what is left of a test daemon's cgroup tree (the
// home's cgroup file names it) once the test is over: a daemon killed with
// SIGKILL leaves its empty cgroups for its next start, which a test's home
// never has. Only empty cgroups go; rmdir refuses the others. A cgroup
// keeps a killed process until it is reaped, and the orphans of a daemon
// killed with SIGKILL are reaped by the machine's init, whenever it gets
// to them: a tree still held is tried again for a few seconds.
func removeCgroupTree(home string) {
	for deadline := time.Now().Add(3 * time.Second); !removeCgroupTreeOnce(home) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroupTreeOnce is one try of removeCgroupTree; it reports whether
// nothing is left of the tree.
func removeCgroupTreeOnce(home string) bool {
	b, err := os.ReadFile(filepath.Join(home, "cgroup"))
	if err != nil {
		return true
	}
	root := strings.TrimSpace(string(b))
	if !strings.Contains(filepath.Base(root), "agentpool-") {
		return true
	}
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
	_, err = os.Stat(root)
	return os.IsNotExist(err)
}

// writeScripted writes home's providers.json: one ACP provider per entry
// of scripts, each the binary's demo agent playing that script (see
// agenttest.Script), with its id as label.
func writeScripted(t testing.TB, home, bin string, scripts map[string]any) {
	t.Helper()
	provs := map[string]any{}
	for id, script := range scripts {
		js, err := json.Marshal(script)
		if err != nil {
			t.Fatal(err)
		}
		provs[id] = map[string]any{"extends": "acp", "label": id, "command": []string{bin, "demo-agent"},
			"env": map[string]string{"AGENTPOOL_DEMO_SCRIPT": string(js)}}
	}
	b, err := json.MarshalIndent(map[string]any{"version": 1, "providers": provs}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, providersFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// stopAtCleanup stops the daemon with SIGTERM when the test ends, and
// logs its output when the test failed.
func (d *daemon) stopAtCleanup() {
	d.t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
		if d.t.Failed() {
			d.t.Logf("daemon output:\n%s", d.out)
		}
	})
}

// cli runs the binary as a client of this daemon.
func (d *daemon) cli(args ...string) (string, error) {
	cmd := exec.Command(d.bin, args...)
	cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+d.home)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// approveNext answers the next permission request of session with allow_once.
func (d *daemon) approveNext(session string) {
	d.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		p, err := d.client.Permissions(ctx, session)
		if err == nil && len(p) > 0 {
			if err := d.client.Answer(ctx, session, p[0].ID, "allow_once"); err != nil {
				d.t.Fatalf("answer: %v", err)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.t.Fatal("no permission request arrived")
}

// promptApproved runs `agentpool prompt` and approves its permission through the API.
func (d *daemon) promptApproved(session, text string) string {
	d.t.Helper()
	type res struct {
		out string
		err error
	}
	ch := make(chan res, 1)
	go func() { out, err := d.cli("prompt", session, text); ch <- res{out, err} }()
	d.approveNext(session)
	select {
	case r := <-ch:
		if r.err != nil {
			d.t.Fatalf("agentpool prompt: %v\n%s", r.err, r.out)
		}
		return r.out
	case <-time.After(60 * time.Second):
		d.t.Fatalf("agentpool prompt did not end; daemon log:\n%s", d.out)
	}
	return ""
}

func processesOf(bin string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if strings.HasPrefix(string(b), bin+"\x00") {
			stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
				continue
			}
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func TestEndToEndDemoSession(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "my repo"), map[string]string{"README.md": "# my project\n"})

	d := startDaemon(t, bin, home)
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "demo")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`session (\S+) created`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("session new output has no id:\n%s", out)
	}
	id := m[1]
	sess, err := d.client.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	out = d.promptApproved(id, "add a greeting")
	if !strings.Contains(out, "end_turn") {
		t.Errorf("prompt output lacks the turn's end:\n%s", out)
	}
	demo := filepath.Join(sess.Worktree.Path, agenttest.DemoFile)
	if b, err := os.ReadFile(demo); err != nil || !strings.Contains(string(b), "add a greeting") {
		t.Fatalf("%s = %q, %v", demo, b, err)
	}
	diff, err := d.client.Diff(context.Background(), id, 0)
	if err != nil || len(diff.Files) != 1 || diff.Files[0].Path != agenttest.DemoFile {
		t.Fatalf("diff = %+v, %v", diff, err)
	}
	// kill -9 the daemon: its agents die with it, a new daemon resumes.
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	waitNoProcesses(t, bin, "agents after the daemon was killed")
	d = startDaemon(t, bin, home)
	d.promptApproved(id, "and a second one")
	evs, err := d.client.EventLog(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	resumed := false
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event log has a gap at %d: seq %d", i, ev.Seq)
		}
		if ev.Type == backends.EventAgentReady && strings.Contains(string(ev.Data), `"resumed":true`) {
			resumed = true
		}
	}
	if !resumed {
		t.Error("the restarted daemon did not resume the agent's session")
	}

	// Close keeps the work on the session's branch.
	if err := os.WriteFile(filepath.Join(sess.Worktree.Path, "uncommitted.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = d.cli("session", "close", id)
	if err != nil {
		t.Fatalf("session close: %v\n%s", err, out)
	}
	if got := e2eGit(t, repo, "show", sess.Worktree.Branch+":uncommitted.txt"); got != "mine\n" {
		t.Fatalf("branch lost uncommitted work: %q", got)
	}
	if got := e2eGit(t, repo, "show", sess.Worktree.Branch+":"+agenttest.DemoFile); !strings.Contains(got, "a second one") {
		t.Fatalf("branch lacks the agent's work: %q", got)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("daemon exit: %v\n%s", err, d.out)
	}
	waitNoProcesses(t, bin, "processes after shutdown")
}

func waitNoProcesses(t *testing.T, bin, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := processesOf(bin)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still running: %v", what, pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
