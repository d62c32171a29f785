package sandbox_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
)

func treeName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "agentpool-test-" + hex.EncodeToString(b[:])
}

func open(t *testing.T, cfg sandbox.Config) *sandbox.Manager {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = treeName(t)
	}
	if cfg.Launcher == nil {
		cfg.Launcher = []string{os.Args[0]}
		cfg.LauncherEnv = []string{sandbox.EnvLauncher + "=1"}
	}
	m, err := sandbox.Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if _, err := m.Sweep(); err != nil {
			t.Errorf("Sweep at cleanup: %v", err)
		}
		_ = m.Close()
		if st := m.Status(); st.Cgroup != "" {
			_ = os.Remove(st.Cgroup)
		}
	})
	return m
}

// cgroupManager opens a Manager whose programs run without namespaces of
// their own (their pids are the daemon's: the escapers' files are read
// from outside).
func cgroupManager(t *testing.T) *sandbox.Manager {
	m := open(t, sandbox.Config{NoNamespaces: true})
	agenttest.RequireFeature(t, m.Status().Containment == sandbox.ContainCgroup, "a writable cgroup v2 hierarchy")
	return m
}

// startIn starts a shell line inside a new jail and returns the jail and
// the command.
func startIn(t *testing.T, m *sandbox.Manager, cfg sandbox.JailConfig, line string, dir string) (*sandbox.Jail, *exec.Cmd, *bytes.Buffer) {
	t.Helper()
	j, err := m.NewJail(cfg)
	if err != nil {
		t.Fatalf("NewJail: %v", err)
	}
	t.Cleanup(func() { _ = j.Release() })
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := j.Prepare(cmd); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return j, cmd, &out
}

// readPids waits for n pids in file.
func readPids(t *testing.T, file string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(file)
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d pids after 5s; want %d", file, len(pids), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func alive(pid int) bool {
	st, err := backends.ReadProcStat(pid)
	return err == nil && st.Live()
}

// escapers is a shell line that leaves a setsid'd sleeper and a
// double-forked one, each writing its pid to file, then waits.
func escapers(file string) string {
	return fmt.Sprintf(`setsid sh -c 'echo $$ >> %[1]s; exec sleep 1000' </dev/null >/dev/null 2>&1 &
( setsid sh -c 'echo $$ >> %[1]s; exec sleep 1000' </dev/null >/dev/null 2>&1 & ) &
sleep 1000`, file)
}

func TestJailKillEndsEscapedDescendants(t *testing.T) {
	for _, mode := range []string{"cgroup", "subreaper"} {
		t.Run(mode, func(t *testing.T) {
			var m *sandbox.Manager
			if mode == "cgroup" {
				m = cgroupManager(t)
			} else {
				m = open(t, sandbox.Config{CgroupParent: "none", NoNamespaces: true})
			}
			dir := t.TempDir()
			pidfile := filepath.Join(dir, "pids")
			j, cmd, _ := startIn(t, m, sandbox.JailConfig{Path: []string{"s1", "agent"}}, escapers(pidfile), dir)
			pids := readPids(t, pidfile, 2)
			for _, pid := range pids {
				st, _ := backends.ReadProcStat(pid)
				if st.Session == cmd.Process.Pid {
					t.Fatalf("pid %d is still in the leader's session; the test proves nothing", pid)
				}
			}
			if err := j.Kill(); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			_ = cmd.Wait()
			for _, pid := range pids {
				if alive(pid) {
					t.Errorf("pid %d survived Kill", pid)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if err := j.Release(); err != nil {
				t.Errorf("Release: %v", err)
			}
			if d := j.Describe(); d.Containment != mode {
				t.Errorf("Describe().Containment = %q; want %q", d.Containment, mode)
			}
		})
	}
}

func TestSweepEndsWhatAPreviousDaemonLeft(t *testing.T) {
	for _, mode := range []string{"cgroup", "subreaper"} {
		t.Run(mode, func(t *testing.T) {
			parent := ""
			if mode == "subreaper" {
				parent = "none"
			}
			name := treeName(t)
			state := filepath.Join(t.TempDir(), "cgroup")
			first := open(t, sandbox.Config{Name: name, CgroupParent: parent, StateFile: state, NoNamespaces: true})
			if mode == "cgroup" {
				agenttest.RequireFeature(t, first.Status().Containment == sandbox.ContainCgroup, "a writable cgroup v2 hierarchy")
			}
			dir := t.TempDir()
			pidfile := filepath.Join(dir, "pids")
			j, err := first.NewJail(sandbox.JailConfig{Path: []string{"s1", "agent", "term-1"}})
			if err != nil {
				t.Fatal(err)
			}
			// Started as a previous daemon would have: it is left running.
			cmd := exec.Command("/bin/sh", "-c", escapers(pidfile))
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := j.Prepare(cmd); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { _ = cmd.Wait() }()
			pids := append(readPids(t, pidfile, 2), cmd.Process.Pid)

			second := open(t, sandbox.Config{Name: name, CgroupParent: parent, StateFile: state, NoNamespaces: true})
			n, err := second.Sweep()
			if err != nil {
				t.Fatalf("Sweep: %v", err)
			}
			if n < 3 {
				t.Errorf("Sweep killed %d processes; want at least 3", n)
			}
			deadline := time.Now().Add(2 * time.Second)
			for _, pid := range pids {
				for alive(pid) && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if alive(pid) {
					t.Errorf("pid %d survived the sweep", pid)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			_ = j.Release()
		})
	}
}

// TestLandlockPolicy: Landlock alone, as on a machine that forbids
// namespaces (TestNamespaceView covers the view).
func TestLandlockPolicy(t *testing.T) {
	agenttest.RequireFeature(t, sandbox.LandlockABI() >= 4, "Landlock ABI 4")
	m := open(t, sandbox.Config{NoNamespaces: true})
	base := t.TempDir()
	home := filepath.Join(base, "home")
	wt := filepath.Join(base, "home", "daemon", "worktrees", "s1")
	secret := filepath.Join(home, ".ssh", "id_ed25519")
	token := filepath.Join(home, "daemon", "token")
	state := filepath.Join(home, ".fake-agent")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{wt, filepath.Dir(secret), state, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{secret, token} {
		if err := os.WriteFile(f, []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	tmpRoot := filepath.Join(home, "daemon", "tmp")

	try := func(t *testing.T, sb backends.SandboxSpec, line string) string {
		t.Helper()
		pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{
			Sandbox: sb, Worktree: wt, Exe: "/bin/sh", PATH: os.Getenv("PATH"), Home: home,
			Protect: []string{filepath.Join(home, "daemon")},
		})
		_, cmd, out := startIn(t, m, sandbox.JailConfig{Path: []string{"s1", "agent"}, Policy: &pol, Session: "s1", TmpRoot: tmpRoot}, line, wt)
		_ = cmd.Wait()
		return strings.TrimSpace(out.String())
	}
	sb := backends.SandboxSpec{Enabled: true, Write: []string{state}}
	cases := []struct {
		name, line, want string
	}{
		{"write worktree", "echo hi > " + filepath.Join(wt, "f") + " && echo ok", "ok"},
		{"write state dir", "echo hi > " + filepath.Join(state, "f") + " && echo ok", "ok"},
		{"write TMPDIR", `echo hi > "$TMPDIR/f" && case "$TMPDIR" in ` + tmpRoot + `/*) echo ok;; esac`, "ok"},
		{"write outside", "{ echo hi > " + filepath.Join(outside, "f") + "; } 2>/dev/null || echo refused", "refused"},
		{"read secret", "cat " + secret + " 2>/dev/null || echo refused", "refused"},
		{"read token", "cat " + token + " 2>/dev/null || echo refused", "refused"},
		{"list home", "ls " + home + " 2>/dev/null || echo refused", "refused"},
		// Agents yield the CPUs to the daemon (sandbox.AgentNice).
		{"lower priority", "nice", "5"},
	}
	ownGroup, _ := os.ReadFile("/proc/self/autogroup")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := try(t, sb, c.line); got != c.want {
				t.Errorf("%s: output %q; want %q", c.line, got, c.want)
			}
		})
	}
	// The launcher shares this process's session, and with it its
	// autogroup: that group's priority, the daemon's, is left alone.
	if after, _ := os.ReadFile("/proc/self/autogroup"); !bytes.Equal(after, ownGroup) {
		t.Errorf("the launcher changed its parent's autogroup: %q, then %q", ownGroup, after)
	}
	// The shell has no TCP client: use the test binary's own dialer.
	exeDir := []string{filepath.Dir(os.Args[0])}
	dial := fmt.Sprintf("%s -test.run=TestHelperDial -- 127.0.0.1:%d", os.Args[0], port)
	for _, c := range []struct {
		name string
		sb   backends.SandboxSpec
		want string
	}{
		{"network all", backends.SandboxSpec{Enabled: true, Read: exeDir}, "dial ok"},
		{"network none", backends.SandboxSpec{Enabled: true, Read: exeDir, Network: backends.NetworkNone}, "dial permission denied"},
		{"network other port", backends.SandboxSpec{Enabled: true, Read: exeDir, Network: backends.NetworkList, Ports: []uint16{1}}, "dial permission denied"},
		{"network this port", backends.SandboxSpec{Enabled: true, Read: exeDir, Network: backends.NetworkList, Ports: []uint16{uint16(port)}}, "dial ok"},
		// Landlock cannot filter hosts: a list with host entries sets no rule.
		{"network list with hosts", backends.SandboxSpec{Enabled: true, Read: exeDir, Network: backends.NetworkList, Ports: []uint16{1}, Hosts: []string{"api.example.com:443"}}, "dial ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := try(t, c.sb, "AGENTPOOL_HELPER_DIAL=1 "+dial)
			if !strings.Contains(got, c.want) {
				t.Errorf("dial under %+v: output %q; want %q", c.sb, got, c.want)
			}
		})
	}
}

// TestHelperDial is not a test: run with AGENTPOOL_HELPER_DIAL=1, it dials
// the address after "--" and prints the outcome.
func TestHelperDial(t *testing.T) {
	if os.Getenv("AGENTPOOL_HELPER_DIAL") != "1" {
		t.Skip("helper")
	}
	addr := os.Args[len(os.Args)-1]
	network := "tcp"
	if rest, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, addr = "unix", rest
	}
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			fmt.Println("dial", errno.Error())
		} else {
			fmt.Println("dial", err)
		}
		os.Exit(0)
	}
	c.Close()
	fmt.Println("dial ok")
	os.Exit(0)
}

func TestRequiredWithoutLandlockRefuses(t *testing.T) {
	m := open(t, sandbox.Config{NoLandlock: true})
	if st := m.Status(); st.Landlock != 0 || len(st.Warnings) == 0 {
		t.Fatalf("Status() = %+v; want no Landlock and a warning", st)
	}
	pol := sandbox.Policy{Required: true}
	if _, err := m.NewJail(sandbox.JailConfig{Path: []string{"s", "a", "agent"}, Policy: &pol}); !errors.Is(err, sandbox.ErrLandlockRequired) {
		t.Fatalf("NewJail(required) without Landlock = %v; want ErrLandlockRequired", err)
	}
	pol.Required = false
	j, err := m.NewJail(sandbox.JailConfig{Path: []string{"s", "a", "agent"}, Policy: &pol})
	if err != nil {
		t.Fatalf("NewJail(not required) without Landlock = %v", err)
	}
	defer j.Release()
	if d := j.Describe(); d.Landlock != 0 || !strings.Contains(d.Warning, "no Landlock") {
		t.Errorf("Describe() = %+v; want Landlock 0 and a warning that says so", d)
	}
}

func TestBuildPolicyRefusesWideGrants(t *testing.T) {
	home := "/home/u"
	pol, dropped := sandbox.BuildPolicy(sandbox.PolicyInput{
		Sandbox:  backends.SandboxSpec{Enabled: true, Read: []string{"/", home, home + "/.ssh/keys", "/data"}, Write: []string{home + "/.agentpool/token", "$WORKTREE/../x", home + "/.tool"}},
		Worktree: home + "/.agentpool/worktrees/r/s1", TmpDir: home + "/.agentpool/tmp/s1", Home: home,
		Protect: []string{home + "/.agentpool", home + "/src/repo"},
		Git:     sandbox.GitPaths{CommonDir: home + "/src/repo/.git", AdminDir: home + "/src/repo/.git/worktrees/s1", Branch: "agentpool/s1"},
	})
	for _, p := range []string{"/", home, home + "/.ssh/keys", home + "/.agentpool/token"} {
		if !slices.Contains(dropped, p) {
			t.Errorf("BuildPolicy kept %q (dropped %q)", p, dropped)
		}
	}
	for _, p := range []string{home + "/.agentpool/worktrees/r/s1", home + "/.agentpool/tmp/s1", home + "/.tool", home + "/src/repo/.git/objects",
		home + "/src/repo/.git/refs/heads/agentpool", home + "/src/repo/.git/logs/refs/heads/agentpool", home + "/src/repo/.git/worktrees/s1"} {
		if !slices.Contains(pol.Write, p) {
			t.Errorf("Write lacks %q: %q", p, pol.Write)
		}
	}
	if !slices.Contains(pol.Read, "/data") || !slices.Contains(pol.Read, home+"/src/repo/.git") {
		t.Errorf("Read = %q; want /data and the common git dir", pol.Read)
	}
	for _, p := range append(pol.Read, pol.Write...) {
		if p == home+"/src/repo" || p == home+"/.agentpool" {
			t.Errorf("policy grants %q", p)
		}
	}
}

// TestBuildPolicyProgramInsideTheCheckout is the quick start: the binary
// built in the checkout the session works on runs its demo agent; the file
// itself is granted, nothing around it.
func TestBuildPolicyProgramInsideTheCheckout(t *testing.T) {
	repo := t.TempDir()
	exe := filepath.Join(repo, "bin", "agentpool")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("\x7fELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(repo, ".agentpool")
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{
		Sandbox: backends.SandboxSpec{Enabled: true}, Worktree: filepath.Join(home, "worktrees", "s1"), Exe: exe,
		Protect: []string{home, repo},
	})
	if !slices.Contains(pol.Read, exe) {
		t.Errorf("Read = %q; want the program %s", pol.Read, exe)
	}
	for _, p := range pol.Read {
		if p == repo || p == filepath.Dir(exe) {
			t.Errorf("Read grants %q, around the program", p)
		}
	}
}

func TestCloseRemovesTheEmptyTree(t *testing.T) {
	m, err := sandbox.Open(sandbox.Config{Name: treeName(t)})
	if err != nil {
		t.Fatal(err)
	}
	root := m.Status().Cgroup
	agenttest.RequireFeature(t, root != "", "a writable cgroup v2 hierarchy")
	j, err := m.NewJail(sandbox.JailConfig{Path: []string{"s1", "a", "agent"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Release(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		_ = os.Remove(root)
		t.Fatalf("cgroup tree %s left after Close: %v", root, err)
	}
}

// TestJailsMadeWhileOthersRelease: jails of one session and agent (an
// agent's and its terminals') are made while their siblings are released.
// A release removes the session's and agent's cgroups when they are empty,
// and must never do so between the mkdirs of a jail being made there.
func TestJailsMadeWhileOthersRelease(t *testing.T) {
	m := cgroupManager(t)
	const workers, rounds = 4, 150
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				j, err := m.NewJail(sandbox.JailConfig{Path: []string{"s1", "agent", fmt.Sprintf("term-%d-%d", w, i)}})
				if err != nil {
					errs <- err
					continue
				}
				if err := j.Release(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 3 {
			t.Errorf("NewJail or Release while siblings come and go: %v", err)
		}
	}
	if n > 3 {
		t.Errorf("… %d errors in all", n)
	}
}
