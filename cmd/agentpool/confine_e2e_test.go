package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/registry"
)

// confineFixture is a daemon whose provider "hostile" is the scripted fake
// agent, run by the real binary's launcher, with a fake $HOME holding a
// secret and an agent state directory.
type confineFixture struct {
	bin, home, fakeHome, repo, outside, exe string
	port                                    int
	// parent is the daemon's --cgroup-parent ("none": the subreaper).
	parent string
}

func newConfineFixture(t *testing.T) *confineFixture {
	t.Helper()
	return newConfineFixtureIn(t, t.TempDir())
}

// newConfineFixtureIn is newConfineFixture with its directories in base.
func newConfineFixtureIn(t *testing.T, base string) *confineFixture {
	t.Helper()
	agenttest.RequireFeature(t, sandbox.LandlockABI() >= 4, "Landlock ABI 4")
	f := &confineFixture{bin: agentpoolBinary(t)}
	f.home = filepath.Join(base, "daemon")
	f.fakeHome = filepath.Join(base, "home")
	f.repo = filepath.Join(base, "repo")
	f.outside = filepath.Join(base, "outside")
	for _, d := range []string{f.home, filepath.Join(f.fakeHome, ".ssh"), filepath.Join(f.fakeHome, ".fake-agent"), f.repo, f.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(f.fakeHome, ".ssh", "id_ed25519"), []byte("PRIVATE KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	e2eRepoAt(t, f.repo, map[string]string{"README.md": "# repo\n"})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f.exe = exe
	return f
}

// writeProvider writes providers.json with the hostile agent running
// script s.
func (f *confineFixture) writeProvider(t *testing.T, s agenttest.Script) {
	t.Helper()
	f.writeProviders(t, map[string]any{"hostile": f.hostileProvider(t, s, map[string]any{"write": []string{"~/.fake-agent"}, "network": "none"})})
}

// hostileProvider is the provider entry of the fake agent running script
// s with the sandbox sb.
func (f *confineFixture) hostileProvider(t *testing.T, s agenttest.Script, sb map[string]any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(raw),
		"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "GORACE": "atexit_sleep_ms=0"}
	for _, kv := range e2eGitEnv[2:] {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return map[string]any{"extends": "acp", "command": []string{f.exe}, "env": env, "sandbox": sb}
}

// start runs the daemon with the fake $HOME.
func (f *confineFixture) start(t *testing.T) *daemon {
	t.Helper()
	t.Setenv("HOME", f.fakeHome)
	// A token in the daemon's environment must not reach its agents.
	d := startDaemon(t, f.bin, f.home, "AGENTPOOL_TOKEN=secret-in-env", "AGENTPOOL_CGROUP_PARENT="+f.parent)
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Signal(syscall.SIGKILL)
			_ = d.cmd.Wait()
		}
	})
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(d.client.BaseURL, "http://"))
	_ = host
	fmt.Sscan(port, &f.port)
	return d
}

// session opens a session of the hostile agent and returns its id and
// worktree.
func (f *confineFixture) session(t *testing.T, d *daemon) (string, string) {
	t.Helper()
	out, err := d.cli("session", "new", "--repo", f.repo, "--agent", "hostile")
	if err != nil {
		t.Fatalf("session new: %v\n%s\ndaemon log:\n%s", err, out, d.out)
	}
	m := regexp.MustCompile(`session (\S+) created`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("session new output has no id:\n%s", out)
	}
	s, err := d.client.Session(context.Background(), m[1])
	if err != nil {
		t.Fatal(err)
	}
	return m[1], s.Worktree.Path
}

// results runs one prompt and returns the agent's sys results by op,
// in order.
func results(t *testing.T, d *daemon, id string) []agenttest.SysResult {
	t.Helper()
	var out []agenttest.SysResult
	for _, text := range turnChunks(t, d, id) {
		if r, ok := agenttest.ParseSysResult(text); ok {
			out = append(out, r)
		}
	}
	return out
}

// turnChunks runs one prompt and returns the texts of the agent's
// message chunks, in order.
func turnChunks(t *testing.T, d *daemon, id string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	turn, err := d.client.Prompt(ctx, id, "", "go", true)
	if err != nil {
		t.Fatalf("prompt: %v\ndaemon log:\n%s", err, d.out)
	}
	evs, err := d.client.EventLog(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Type != backends.EventMessageChunk || ev.Turn != turn.ID {
			continue
		}
		var c backends.ChunkData
		if json.Unmarshal(ev.Data, &c) == nil {
			out = append(out, c.Text)
		}
	}
	return out
}

func sys(op agenttest.SysOp) agenttest.Step { return agenttest.Step{Sys: &op} }

// TestConfinementEndToEnd drives the real binary: a hostile agent's own
// system calls are refused outside its worktree, its state directory and
// its TMPDIR; it can still commit on its branch; the network is closed to
// it; and what it and its terminals leave running (setsid, double fork)
// ends with the session, with the daemon, and at the next start after a
// kill -9.
//
// In its own mount namespace, what the agent was not granted is missing
// (ENOENT: the daemon's token, the user's key, a directory of nobody's
// grants) or read-only (EROFS: the main checkout, shown only because its
// .git leads to the worktree's git directory); in its own network
// namespace the daemon's port is nobody's (ECONNREFUSED); in its own PID
// namespace the daemon has no /proc entry and no pid to signal. What
// proves the confinement is the host's side: nothing there changed.
func TestConfinementEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	f := newConfineFixture(t)
	token := filepath.Join(f.home, tokenFileName)
	steps := []agenttest.Step{
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: "inside.txt", Content: "mine"}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: filepath.Join(f.outside, "x"), Content: "escape"}),
		sys(agenttest.SysOp{Op: agenttest.OpRead, Path: token}),
		sys(agenttest.SysOp{Op: agenttest.OpRead, Path: filepath.Join(f.fakeHome, ".ssh", "id_ed25519")}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: filepath.Join(f.repo, ".git", "hooks", "pre-commit"), Content: "#!/bin/sh\n"}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: filepath.Join(f.repo, ".git", "config"), Content: "[core]\n"}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: filepath.Join(f.repo, "README.md"), Content: "defaced"}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: filepath.Join(f.fakeHome, ".fake-agent", "state"), Content: "ok"}),
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", `echo t > "$TMPDIR/t" && cat "$TMPDIR/t"`}}),
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", "git add inside.txt && git commit -q -m 'agent commit' && git log -1 --format=%s"}}),
		sys(agenttest.SysOp{Op: agenttest.OpConnect, Addr: "127.0.0.1:PORT"}),
		sys(agenttest.SysOp{Op: agenttest.OpSetsidChild, Path: "pids"}),
		sys(agenttest.SysOp{Op: agenttest.OpDaemon, Path: "pids"}),
		// What else could let it answer its own permission requests: the
		// token in its environment, the daemon's memory or environment,
		// or a signal to the daemon.
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", `echo "token=[$AGENTPOOL_TOKEN]"`}}),
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", "test -e /proc/DAEMON || echo absent"}}),
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", "kill -STOP DAEMON 2>&1 || echo refused"}}),
		// A terminal that leaves a daemon behind and keeps running.
		{Terminal: &agenttest.Terminal{NoWait: true, Command: fmt.Sprintf("GORACE=atexit_sleep_ms=0 %s=%s %s pids && exec sleep 1000", agenttest.EnvHelper, agenttest.HelperDaemonize, f.exe)}},
		// The main checkout shows only as the way to its .git: none of
		// its files is there to read.
		sys(agenttest.SysOp{Op: agenttest.OpRead, Path: filepath.Join(f.repo, "README.md")}),
	}
	type want struct{ op, status, detail string }
	wants := []want{
		{"write", "ok", ""}, {"write", "ENOENT", ""}, {"read", "ENOENT", ""}, {"read", "ENOENT", ""},
		{"write", "EROFS", ""}, {"write", "EROFS", ""}, {"write", "EROFS", ""}, {"write", "ok", ""},
		{"exec", "ok", "exit=0 t"}, {"exec", "ok", "exit=0 agent commit"}, {"connect", "ECONNREFUSED", ""},
		{"setsid_child", "ok", ""}, {"daemon", "ok", ""},
		{"exec", "ok", "exit=0 token=[]"}, {"exec", "ok", "exit=0 absent\n"}, {"exec", "ok", "exit=0 refused\n"},
		{"read", "ENOENT", ""},
	}
	gitConfig, err := os.ReadFile(filepath.Join(f.repo, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}

	// One round per way the session can end, with cgroups and with the
	// subreaper fallback.
	for _, mode := range []string{"cgroup", "subreaper"} {
		for _, end := range []string{"close", "sigterm", "kill -9"} {
			t.Run(mode+"/"+end, func(t *testing.T) {
				f.parent = ""
				if mode == "subreaper" {
					f.parent = "none"
				}
				f.writeProvider(t, agenttest.Script{})
				d := f.start(t)
				if st := health(t, d); st.Containment != mode {
					t.Fatalf("daemon confinement %+v; want %s", st, mode)
				}
				s := append([]agenttest.Step(nil), steps...)
				s[10] = sys(agenttest.SysOp{Op: agenttest.OpConnect, Addr: fmt.Sprintf("127.0.0.1:%d", f.port)})
				daemonPID := strconv.Itoa(d.cmd.Process.Pid)
				// The daemon is not in the agent's PID namespace: no
				// /proc entry to read its environment or memory from.
				s[14] = sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", "test -e /proc/" + daemonPID + " && tr '\\0' '\\n' < /proc/" + daemonPID + "/environ | grep -c '^AGENTPOOL_TOKEN=' || echo absent"}})
				s[15] = sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", "kill -STOP " + daemonPID + " 2>/dev/null || echo refused"}})
				f.writeProvider(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: s}}})
				waitProviderReady(t, d, "hostile")
				id, wt := f.session(t, d)
				got := results(t, d, id)
				if len(got) != len(wants) {
					t.Fatalf("%d sys results %v; want %d\ndaemon log:\n%s", len(got), got, len(wants), d.out)
				}
				for i, w := range wants {
					if got[i].Op != w.op || got[i].Status != w.status || (w.detail != "" && !strings.HasPrefix(got[i].Detail, w.detail)) {
						t.Errorf("step %d: %s %s %q; want %s %s %q", i, got[i].Op, got[i].Status, got[i].Detail, w.op, w.status, w.detail)
					}
				}
				secret, err := os.ReadFile(token)
				if err != nil || len(secret) == 0 {
					t.Fatalf("the daemon's token: %q, %v", secret, err)
				}
				for i, r := range got {
					if strings.Contains(r.Detail, "PRIVATE KEY") || strings.Contains(r.Detail, strings.TrimSpace(string(secret))) {
						t.Errorf("step %d got a secret: %s", i, r)
					}
				}
				if st, err := agenttest.ReadProcStat(d.cmd.Process.Pid); err != nil || st.State == 'T' {
					t.Errorf("the daemon after the agent's kill -STOP: %+v, %v; want it running", st, err)
				}
				if _, err := os.Stat(filepath.Join(f.outside, "x")); err == nil {
					t.Error("the agent wrote outside its grants")
				}
				if b, err := os.ReadFile(filepath.Join(f.repo, "README.md")); err != nil || string(b) != "# repo\n" {
					t.Errorf("main checkout's README.md = %q, %v", b, err)
				}
				if b, err := os.ReadFile(filepath.Join(f.repo, ".git", "config")); err != nil || string(b) != string(gitConfig) {
					t.Errorf("the repository's .git/config = %q, %v; want it unchanged", b, err)
				}
				if _, err := os.Stat(filepath.Join(f.repo, ".git", "hooks", "pre-commit")); err == nil {
					t.Error("the agent planted a hook in the repository")
				}
				if log := e2eGit(t, f.repo, "log", "-1", "--format=%s", "agentpool/"+id); strings.TrimSpace(log) != "agent commit" {
					t.Errorf("branch head = %q; want the agent's commit", log)
				}
				// Three escapers: setsid child, double-forked daemon, and the
				// daemon a terminal command left.
				pids := waitPids(t, filepath.Join(wt, "pids"), 3)
				// Whatever happens to this test, leave none of them behind.
				t.Cleanup(func() {
					for _, p := range pids {
						_ = agenttest.Kill(p, time.Second)
					}
				})
				for _, p := range pids {
					if !agenttest.Alive(p) {
						t.Fatalf("escaper %v is not running before the end; the test proves nothing", p)
					}
				}
				switch end {
				case "close":
					if out, err := d.cli("session", "close", id); err != nil {
						t.Fatalf("session close: %v\n%s", err, out)
					}
				case "sigterm":
					_ = d.cmd.Process.Signal(syscall.SIGTERM)
					if err := d.cmd.Wait(); err != nil {
						t.Errorf("daemon exit: %v", err)
					}
				case "kill -9":
					_ = d.cmd.Process.Signal(syscall.SIGKILL)
					_ = d.cmd.Wait()
					time.Sleep(200 * time.Millisecond)
					survivors := 0
					for _, p := range pids {
						if agenttest.Alive(p) {
							survivors++
						}
					}
					t.Logf("%d of %d escapers outlived the killed daemon; the next start must end them", survivors, len(pids))
					d = f.start(t)
				}
				deadline := time.Now().Add(5 * time.Second)
				for _, p := range pids {
					for agenttest.Alive(p) && time.Now().Before(deadline) {
						time.Sleep(10 * time.Millisecond)
					}
					if agenttest.Alive(p) {
						t.Errorf("after %s: escaper %v still runs", end, p)
						_ = agenttest.Kill(p, time.Second)
					}
				}
				if d.cmd.ProcessState == nil {
					_ = d.cmd.Process.Signal(syscall.SIGTERM)
					_ = d.cmd.Wait()
				}
			})
		}
	}
}

// health returns the daemon's confinement status.
func health(t *testing.T, d *daemon) sandbox.Status {
	t.Helper()
	h, err := d.client.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(h.Confinement)
	var st sandbox.Status
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitProviderReady waits until the daemon reports provider id ready.
func waitProviderReady(t *testing.T, d *daemon, id string) {
	t.Helper()
	// The providers file as it is now must be the one in force: a
	// provider rewritten while ready is ready at once, with its old spec,
	// until the daemon has read the file again.
	want := ""
	if b, err := os.ReadFile(filepath.Join(d.home, providersFile)); err == nil {
		want = registry.ETagOf(b)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		snap, err := d.client.Providers(context.Background())
		if err == nil && (want == "" || snap.ETag == want) {
			for _, p := range snap.Providers {
				if p.ID == id && p.Status == "ready" {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider %q never became ready: %+v, %v\n%s", id, snap, err, d.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitPids waits for n lines in a pid file.
func waitPids(t *testing.T, file string, n int) []agenttest.PidEntry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, _ := agenttest.ReadPidFile(file)
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d pids; want %d", file, len(pids), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestQuickStartFromACheckout follows the README's quick start: the binary
// is built inside the checkout a session then works on (bin/agentpool, the
// daemon's home in .agentpool beside it), and its confined demo agent
// still runs and writes its file.
func TestQuickStartFromACheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	built := agentpoolBinary(t)
	repo := e2eRepoAt(t, t.TempDir(), map[string]string{".gitignore": "/bin/\n/.agentpool/\n", "README.md": "# checkout\n"})
	bin := filepath.Join(repo, "bin", "agentpool")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, bin, filepath.Join(repo, ".agentpool"))
	defer func() { _ = d.cmd.Process.Kill(); _ = d.cmd.Wait() }()
	out, err := d.cli("session", "new", "--repo", repo)
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	ss, err := d.client.Sessions(context.Background())
	if err != nil || len(ss) != 1 {
		t.Fatalf("sessions = %v, %v", ss, err)
	}
	out = d.promptApproved(ss[0].ID, "add a greeting")
	if !strings.Contains(out, "end_turn") {
		t.Fatalf("the demo turn did not end normally:\n%s\ndaemon log:\n%s", out, d.out)
	}
	if b, err := os.ReadFile(filepath.Join(ss[0].Worktree.Path, agenttest.DemoFile)); err != nil || !strings.Contains(string(b), "add a greeting") {
		t.Fatalf("%s = %q, %v", agenttest.DemoFile, b, err)
	}
	// Nothing is wrong: the daemon warns about nothing of the sandbox (the
	// directory around bin/agentpool is refused, the program granted).
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
	for _, line := range strings.Split(d.out.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "sandbox") {
			t.Errorf("the quick start's daemon warns: %s", line)
		}
	}
}
