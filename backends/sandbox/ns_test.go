package sandbox_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
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

	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// nsManager opens a Manager whose programs run in namespaces of their own.
func nsManager(t *testing.T) *sandbox.Manager {
	t.Helper()
	m := open(t, sandbox.Config{})
	st := m.Status()
	agenttest.RequireFeature(t, st.Namespaces, "namespaces for confined programs ("+st.NamespacesError+")")
	return m
}

// fakeProxy is an egress proxy on a unix socket that answers every
// CONNECT with 200 and a line naming the target, and records the targets.
type fakeProxy struct {
	path string
	mu   sync.Mutex
	seen []string
}

func newFakeProxy(t *testing.T) *fakeProxy {
	t.Helper()
	dir, err := os.MkdirTemp("", "ap-egress-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &fakeProxy{path: filepath.Join(dir, "e.sock")}
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				for {
					l, err := br.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				target := strings.Fields(line)[1]
				p.mu.Lock()
				p.seen = append(p.seen, target)
				p.mu.Unlock()
				fmt.Fprintf(c, "HTTP/1.1 200 Connection established\r\n\r\nhello from %s\n", target)
			}()
		}
	}()
	return p
}

func (p *fakeProxy) targets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// TestHelperTalk is not a test: run with AGENTPOOL_HELPER_TALK=1, it dials
// the address after "--", sends $AGENTPOOL_HELPER_SEND and prints what
// comes back.
func TestHelperTalk(t *testing.T) {
	if os.Getenv("AGENTPOOL_HELPER_TALK") != "1" {
		t.Skip("helper")
	}
	c, err := net.DialTimeout("tcp", os.Args[len(os.Args)-1], 2*time.Second)
	if err != nil {
		fmt.Println("dial error:", err)
		os.Exit(0)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if s := os.Getenv("AGENTPOOL_HELPER_SEND"); s != "" {
		_, _ = io.WriteString(c, strings.ReplaceAll(s, `\r\n`, "\r\n"))
	}
	b, _ := io.ReadAll(c)
	fmt.Print(string(b))
	os.Exit(0)
}

// TestNamespaceView: a confined program sees its own world — only the
// granted paths, its own processes, no capability, its own network — and
// none of the ways out that Landlock alone leaves open.
func TestNamespaceView(t *testing.T) {
	m := nsManager(t)
	base := t.TempDir()
	home := filepath.Join(base, "home")
	wt := filepath.Join(base, "home", "daemon", "worktrees", "s1")
	state := filepath.Join(home, ".fake-agent")
	secretDir := filepath.Join(base, "user-run") // a 0700 directory of the user's sockets
	for _, d := range []string{wt, state, secretDir, filepath.Join(home, ".ssh")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A state file of the agent's in the home itself (~/.claude.json).
	stateFile := filepath.Join(home, ".fake-agent.json")
	if err := os.WriteFile(stateFile, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The user's servers: a tmux-like one on a path socket, one on an
	// abstract socket, one on loopback TCP.
	pathSock := filepath.Join(secretDir, "tmux.sock")
	abstract := "@agentpool-test-" + strconv.Itoa(os.Getpid())
	var lns []net.Listener
	for _, a := range [][2]string{{"unix", pathSock}, {"unix", abstract}, {"tcp4", "127.0.0.1:0"}} {
		lns = append(lns, acceptAndClose(t, a[0], a[1]))
	}
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	tcpAddr := lns[2].Addr().String()
	// A process of the user's holding a secret in its environment.
	holder := exec.Command("sleep", "60")
	holder.Env = append(os.Environ(), "HOLDER_SECRET=hunter2")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()

	proxy := newFakeProxy(t)
	tmpRoot := filepath.Join(home, "daemon", "tmp")
	exeDir := filepath.Dir(os.Args[0])
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{
		Sandbox:  backends.SandboxSpec{Enabled: true, Read: []string{exeDir}, Write: []string{state, stateFile}},
		Worktree: wt, Exe: "/bin/sh", PATH: os.Getenv("PATH"), Home: home,
		Protect: []string{filepath.Join(home, "daemon")},
	})
	// In the home, Landlock refuses what is not granted (EACCES), as it
	// does a file beside a granted one.
	refused := "Permission denied"
	if sandbox.LandlockABI() == 0 {
		refused = "Read-only"
	}
	run := func(t *testing.T, line string) string {
		t.Helper()
		_, cmd, out := startIn(t, m, sandbox.JailConfig{Path: []string{"s1", "agent"}, Policy: &pol, Session: "s1", TmpRoot: tmpRoot,
			Egress: &sandbox.EgressView{Socket: proxy.path, Forward: []sandbox.Forward{{Port: 11434, Target: "127.0.0.1:11434"}}}}, line, wt)
		_ = cmd.Wait()
		return strings.TrimSpace(out.String())
	}
	dial := func(addr string) string {
		return fmt.Sprintf("AGENTPOOL_HELPER_DIAL=1 %s -test.run=TestHelperDial -- %s", os.Args[0], addr)
	}
	talk := func(send, addr string) string {
		return fmt.Sprintf("AGENTPOOL_HELPER_TALK=1 AGENTPOOL_HELPER_SEND='%s' %s -test.run=TestHelperTalk -- %s", send, os.Args[0], addr)
	}
	cases := []struct {
		name, line string
		want       func(string) bool
		wantText   string
	}{
		{"write worktree", "echo hi > " + filepath.Join(wt, "f") + " && cat " + filepath.Join(wt, "f"), eq("hi"), "hi"},
		{"write state dir", "echo hi > " + filepath.Join(state, "f") + " && echo ok", eq("ok"), "ok"},
		{"home shows only grants", "ls -A " + home, func(s string) bool { return !strings.Contains(s, ".ssh") && strings.Contains(s, ".fake-agent") }, "no .ssh"},
		{"path socket in a 0700 dir", dial("unix:" + pathSock), contains("no such file or directory"), "no such file"},
		{"abstract socket", dial("unix:" + abstract), contains("connection refused"), "connection refused"},
		{"loopback TCP service", dial(tcpAddr), contains("connection refused"), "connection refused"},
		{"only own processes", `n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n`, func(s string) bool { n, err := strconv.Atoi(s); return err == nil && n <= 4 }, "at most 4 pids"},
		{"foreign environ", fmt.Sprintf("cat /proc/%d/environ 2>&1 | grep -c hunter2 || true", holder.Process.Pid), eq("0"), "0"},
		{"no capabilities", "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status | tr -s '\\t ' ' '",
			eq("CapInh: 0000000000000000\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nCapAmb: 0000000000000000\nNoNewPrivs: 1"), "no capabilities, no-new-privs"},
		{"no /run/user", "ls /run/user 2>&1 || true", contains("No such file"), "no /run/user"},
		{"shadow hidden", "wc -c < /etc/shadow 2>/dev/null || echo 0", eq("0"), "0"},
		{"owner-only system files hidden", "find /etc /opt ! -perm -o=r -user $(id -u) ! -type l 2>/dev/null | while read f; do if [ -d \"$f\" ]; then ls -A \"$f\"; else cat \"$f\"; fi; done | wc -c", eq("0"), "nothing readable"},
		{"own /tmp", "echo mine > /tmp/f && cat /tmp/f && ls " + filepath.Dir(base), eq("mine\n" + filepath.Base(base)), "its own /tmp, showing only the grants' directories"},
		{"no write on the way to a grant", "{ echo x > " + filepath.Join(home, "daemon", "pwned") + "; } 2>&1 | grep -c '" + refused + "'", eq("1"), refused},
		{"no write in the home", "{ echo x > " + filepath.Join(home, "pwned") + "; } 2>&1 | grep -c '" + refused + "'; ls -A " + home + " | grep -c pwned", eq("1\n0"), refused},
		// claude-code saves ~/.claude.json through a temporary file beside
		// it, and writes it in place when that fails with EACCES.
		{"a granted file in the home, in place", "{ echo x > " + stateFile + ".tmp.1; } 2>&1 | grep -c '" + refused + "'; echo '{\"saved\":1}' > " + stateFile + " && echo ok",
			eq("1\nok"), refused + ", then ok"},
		{"a write kept on the way to a grant", "{ echo x > " + filepath.Join(base, "pwned") + "; } 2>&1 | grep -c 'Read-only'", eq("1"), "read-only"},
		{"bounded /tmp", "df -k /tmp | awk 'NR==2{print $2}'", func(s string) bool {
			kb, err := strconv.Atoi(s)
			return err == nil && kb > 0 && kb <= int(totalMemKB()/9)
		}, "at most a tenth of the memory"},
		{"session TMPDIR", `echo shared > "$TMPDIR/f" && cat ` + filepath.Join(tmpRoot, "s1", "f"), eq("shared"), "shared"},
		{"proxy variables", "echo $HTTPS_PROXY $ALL_PROXY $NO_PROXY", eq("http://127.0.0.1:3128 socks5h://127.0.0.1:3128 localhost,127.0.0.1,::1"), "the egress proxy"},
		{"egress through the proxy", talk(`CONNECT example.org:443 HTTP/1.1\r\n\r\n`, "127.0.0.1:3128"), contains("hello from example.org:443"), "hello from example.org:443"},
		{"forwarded loopback port", talk("", "127.0.0.1:11434"), contains("hello from 127.0.0.1:11434"), "hello from 127.0.0.1:11434"},
		{"exit status", "exit 7", eq(""), ""},
		{"seccomp", "AGENTPOOL_HELPER_SYSCALLS=1 " + os.Args[0] + " -test.run=TestHelperSyscalls", eq("bpf EPERM\nkeyctl EPERM\nio_uring_setup EPERM\nunshare EPERM\ngetpid ok"), "the denied calls refused, getpid allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := run(t, c.line); !c.want(got) {
				t.Errorf("%s\noutput %q; want %s", c.line, got, c.wantText)
			}
		})
	}
	if b, err := os.ReadFile(stateFile); err != nil || string(b) != "{\"saved\":1}\n" {
		t.Errorf("the agent's state file in the home after it wrote it in place: %q, %v", b, err)
	}
	if got := proxy.targets(); len(got) < 2 {
		t.Errorf("the proxy saw %q; want the CONNECT and the forwarded port", got)
	}
	if _, err := os.Stat(filepath.Join(secretDir, "tmux.sock")); err != nil {
		t.Errorf("the user's socket: %v", err)
	}
}

// acceptAndClose listens at addr and closes every connection it accepts,
// until the listener is closed.
func acceptAndClose(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln
}

func eq(want string) func(string) bool { return func(s string) bool { return s == want } }
func contains(want string) func(string) bool {
	return func(s string) bool { return strings.Contains(s, want) }
}

// TestNamespaceExitAndSignals: the program's exit status passes through
// the launcher; a SIGTERM to the process group reaches the program, which
// exits its own way; killing the launcher ends every process of the
// namespace, escapers included, without a cgroup.
func TestNamespaceExitAndSignals(t *testing.T) {
	m := nsManager(t)
	wt := t.TempDir()
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: backends.SandboxSpec{Enabled: true}, Worktree: wt, Exe: "/bin/sh", PATH: os.Getenv("PATH")})
	tmp := t.TempDir()
	jc := func(leaf string) sandbox.JailConfig {
		return sandbox.JailConfig{Path: []string{"s1", leaf}, Policy: &pol, Session: "s1", TmpRoot: tmp}
	}
	_, cmd, _ := startIn(t, m, jc("exit"), "exit 7", wt)
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 7 {
		t.Errorf("exit 7 in the view: %v", err)
	}
	mark := filepath.Join(wt, "mark")
	marked := func(want string) func() bool {
		return func() bool { b, _ := os.ReadFile(mark); return strings.Contains(string(b), want) }
	}
	_, cmd, out := startIn(t, m, jc("term"), `trap 'echo got TERM; exit 3' TERM; echo ready > mark; while :; do sleep 0.05; done`, wt)
	waitFor(t, marked("ready"))
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 3 || !strings.Contains(out.String(), "got TERM") {
		t.Errorf("SIGTERM to the group: %v, output %q; want the program's trap and exit 3", err, out)
	}
	// A program killed by signal n: 128+n, as a shell says it.
	_, cmd, _ = startIn(t, m, jc("killed"), `kill -KILL $$`, wt)
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 128+9 {
		t.Errorf("a program that killed itself: %v; want exit status 137", err)
	}
	// Escapers (setsid, double fork) die with the namespace's first
	// process, whatever their group or session.
	_, cmd, _ = startIn(t, m, jc("escape"), `setsid sh -c 'sleep 1000' </dev/null >/dev/null 2>&1 &
( setsid sh -c 'sleep 1000' </dev/null >/dev/null 2>&1 & ) &
sleep 0.2; echo started > mark; sleep 1000`, wt)
	waitFor(t, marked("started"))
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid_for_children", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(inPidNS(ns)); n < 3 {
		t.Fatalf("%d processes in the namespace; want the shell and two escapers", n)
	}
	// The namespace's first process killed (as a cgroup's kill does):
	// the launcher the daemon started ends by the same signal.
	first := 0
	for _, pid := range inPidNS(ns) {
		if st, err := backends.ReadProcStat(pid); err == nil && st.PPID == cmd.Process.Pid {
			first = pid
		}
	}
	if first == 0 {
		t.Fatal("no child of the launcher in the namespace")
	}
	_ = syscall.Kill(first, syscall.SIGKILL)
	if err := cmd.Wait(); !signalled(cmd, syscall.SIGKILL) {
		t.Errorf("the namespace's first process killed: the launcher %v; want killed by SIGKILL", err)
	}
	waitFor(t, func() bool { return len(inPidNS(ns)) == 0 })
	// The launcher the daemon started killed (as the daemon's end kills
	// it, by its parent-death signal): the namespace ends with it.
	_, cmd, _ = startIn(t, m, jc("orphaned"), `echo started > mark2; sleep 1000`, wt)
	waitFor(t, func() bool { b, _ := os.ReadFile(filepath.Join(wt, "mark2")); return len(b) > 0 })
	if ns, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid_for_children", cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waitFor(t, func() bool { return len(inPidNS(ns)) == 0 })
}

// signalled reports whether cmd, waited for, was killed by sig.
func signalled(cmd *exec.Cmd, sig syscall.Signal) bool {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// TestLauncherMakesItsNamespaces: the process the daemon starts makes the
// namespaces itself (the daemon starts it with a plain vfork): it stays in
// the daemon's PID namespace, the program runs in its children's, it keeps
// no capability and cannot gain privileges, it holds none of the program's
// files (the daemon sees the program's stdout end when the program closes
// it), and the program's environment has none of the variables that steer
// a launcher, even ones the caller set.
func TestLauncherMakesItsNamespaces(t *testing.T) {
	m := nsManager(t)
	wt := t.TempDir()
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: backends.SandboxSpec{Enabled: true}, Worktree: wt, Exe: "/bin/sh", PATH: os.Getenv("PATH")})
	j, err := m.NewJail(sandbox.JailConfig{Path: []string{"s1", "agent"}, Policy: &pol, Session: "s1", TmpRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Release() })
	cmd := exec.Command("/bin/sh", "-c", `env | grep -c '^AGENTPOOL_\(UNSHARE\|NSENTER\)='; readlink /proc/self/ns/pid; exec 1>&- 2>&-; sleep 1000`)
	cmd.Dir = wt
	cmd.Env = append(os.Environ(), sandbox.EnvUnshare+"=0", sandbox.EnvNsenter+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := j.Prepare(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The program closed its stdout: the pipe ends although the program
	// and both launcher processes live.
	b, err := io.ReadAll(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	if len(lines) != 2 || lines[0] != "0" {
		t.Fatalf("program said %q; want 0 launcher variables and its PID namespace", b)
	}
	self, _ := os.Readlink("/proc/self/ns/pid")
	leader, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", cmd.Process.Pid))
	children, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid_for_children", cmd.Process.Pid))
	if leader != self || children != lines[1] || children == self {
		t.Errorf("launcher in PID namespace %s (daemon's %s), its children's %s; the program's %s", leader, self, children, lines[1])
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if !strings.Contains(string(status), "CapEff:\t0000000000000000") || !strings.Contains(string(status), "NoNewPrivs:\t1") {
		t.Errorf("the launcher the daemon started kept capabilities or may gain privileges:\n%s", status)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
	if err != nil || len(fds) < 3 {
		t.Fatalf("the launcher's files: %d, %v; want its stdin, stdout and stderr at least", len(fds), err)
	}
	for _, fd := range fds {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd.Name())); target != "/dev/null" {
			t.Errorf("the launcher the daemon started holds fd %s: %s", fd.Name(), target)
		}
	}
}

// inPidNS lists the pids whose PID namespace is ns.
func inPidNS(ns string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && l == ns && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTerminalJoinsItsAgent: a terminal's jail joins its agent's
// namespaces — the same view, /tmp, processes and network — and its
// command still runs with no capability under the rules.
func TestTerminalJoinsItsAgent(t *testing.T) {
	m := nsManager(t)
	wt := t.TempDir()
	tmp := t.TempDir()
	proxy := newFakeProxy(t)
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: backends.SandboxSpec{Enabled: true}, Worktree: wt, Exe: "/bin/sh", PATH: os.Getenv("PATH")})
	agent, cmd, _ := startIn(t, m, sandbox.JailConfig{Path: []string{"s1", "agent"}, Policy: &pol, Session: "s1", TmpRoot: tmp,
		Egress: &sandbox.EgressView{Socket: proxy.path}}, `echo from-agent > /tmp/shared; echo $$ > mark; exec sleep 1000`, wt)
	mark := filepath.Join(wt, "mark")
	waitFor(t, func() bool { b, _ := os.ReadFile(mark); return len(b) > 0 })
	_, term, out := startIn(t, m, sandbox.JailConfig{Path: []string{"s1", "term1"}, Policy: &pol, Session: "s1", TmpRoot: tmp, Join: agent},
		`cat /tmp/shared; kill -0 $(cat mark) && echo agent-visible; readlink /proc/self/ns/net /proc/self/ns/mnt /proc/self/ns/pid; grep -E '^CapEff' /proc/self/status; echo $HTTPS_PROXY`, wt)
	if err := term.Wait(); err != nil {
		t.Fatalf("terminal: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"from-agent", "agent-visible"}
	// The launcher the daemon started stays in the daemon's PID
	// namespace; the agent's is that of its children.
	for _, ns := range []string{"net", "mnt", "pid_for_children"} {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", cmd.Process.Pid, ns))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, l)
	}
	want = append(want, "CapEff:\t0000000000000000", "http://127.0.0.1:3128")
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("terminal saw:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// With its agent gone, a terminal cannot start in its world.
	j, err := m.NewJail(sandbox.JailConfig{Path: []string{"s1", "term2"}, Policy: &pol, Session: "s1", TmpRoot: tmp, Join: agent})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Release()
	if err := j.Prepare(exec.Command("/bin/sh", "-c", "echo ran")); err == nil {
		t.Error("a terminal of a dead agent was prepared to run")
	}
}

// TestJoinedElsewhereRefuses: a launcher told it joined an agent's
// namespaces but running elsewhere (a binary without the constructor that
// joins them) refuses to run the program.
func TestJoinedElsewhereRefuses(t *testing.T) {
	raw := `{"no_rules":true,"joined":"mnt:[1]"}`
	cmd := exec.Command(os.Args[0], raw, "/bin/sh", "sh", "-c", "echo ran")
	cmd.Env = append(os.Environ(), sandbox.EnvLauncher+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "ran") || !strings.Contains(string(out), "not in the agent's namespaces") {
		t.Errorf("launcher outside the namespaces it was to join: %v, %q", err, out)
	}
}

// TestSocketGrant: a socket the provider grants ("sandbox.sockets") is
// reachable in the view, at its own path; one inside the daemon's home is
// refused with a note.
func TestSocketGrant(t *testing.T) {
	m := nsManager(t)
	base := t.TempDir()
	wt := filepath.Join(base, "wt")
	daemonHome := filepath.Join(base, "daemon")
	for _, d := range []string{wt, daemonHome, filepath.Join(base, "run")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	granted := filepath.Join(base, "run", "docker.sock")
	inHome := filepath.Join(daemonHome, "api.sock")
	for _, p := range []string{granted, inHome} {
		defer acceptAndClose(t, "unix", p).Close()
	}
	res := sandbox.PolicyFor(sandbox.PolicyInput{
		Sandbox:  backends.SandboxSpec{Enabled: true, Read: []string{filepath.Dir(os.Args[0])}, Sockets: []string{granted, inHome}},
		Worktree: wt, Exe: "/bin/sh", PATH: os.Getenv("PATH"), Protect: []string{daemonHome},
	})
	if len(res.Notes) != 1 || res.Notes[0].Path != inHome || res.Notes[0].Entry != sandbox.EntrySockets {
		t.Errorf("notes = %+v; want the socket in the daemon's home refused", res.Notes)
	}
	pol := res.Policy
	for _, c := range []struct{ path, want string }{{granted, "dial ok"}, {inHome, "no such file"}} {
		_, cmd, out := startIn(t, m, sandbox.JailConfig{Path: []string{"s1", "sock"}, Policy: &pol, Session: "s1", TmpRoot: t.TempDir()},
			fmt.Sprintf("AGENTPOOL_HELPER_DIAL=1 %s -test.run=TestHelperDial -- unix:%s", os.Args[0], c.path), wt)
		_ = cmd.Wait()
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("dial %s: %q; want %q", c.path, out, c.want)
		}
	}
}

// TestRequiredWithoutNamespacesRefuses: on a machine where programs cannot
// have namespaces of their own, a provider whose sandbox is required does
// not start, and the manager says why everywhere it reports its status.
func TestRequiredWithoutNamespacesRefuses(t *testing.T) {
	agenttest.RequireFeature(t, sandbox.LandlockABI() >= 1, "Landlock")
	m := open(t, sandbox.Config{NoNamespaces: true})
	st := m.Status()
	if st.Namespaces || !slices.ContainsFunc(st.Warnings, func(w string) bool {
		return strings.HasPrefix(w, "Landlock only: agents can reach unix sockets and local services")
	}) {
		t.Errorf("status %+v; want no namespaces and the Landlock-only warning", st)
	}
	wt := t.TempDir()
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: backends.SandboxSpec{Enabled: true, Required: true}, Worktree: wt, Exe: "/bin/sh", PATH: os.Getenv("PATH")})
	if _, err := m.NewJail(sandbox.JailConfig{Path: []string{"s1", "agent"}, Policy: &pol}); !errors.Is(err, sandbox.ErrNamespacesRequired) {
		t.Errorf("NewJail of a required sandbox without namespaces: %v; want ErrNamespacesRequired", err)
	}
	pol.Required = false
	j, _, _ := startIn(t, m, sandbox.JailConfig{Path: []string{"s1", "agent2"}, Policy: &pol}, "true", wt)
	if d := j.Describe(); d.Namespaces || !strings.Contains(d.Warning, "Landlock only") {
		t.Errorf("Describe() = %+v; want no namespaces and the Landlock-only warning", d)
	}
}

// TestHelperSyscalls is not a test: run with AGENTPOOL_HELPER_SYSCALLS=1,
// it makes system calls the seccomp filter refuses, and one it allows,
// and prints how each went.
func TestHelperSyscalls(t *testing.T) {
	if os.Getenv("AGENTPOOL_HELPER_SYSCALLS") != "1" {
		t.Skip("helper")
	}
	report := func(name string, err syscall.Errno) {
		switch err {
		case 0:
			fmt.Println(name, "ok")
		case syscall.EPERM:
			fmt.Println(name, "EPERM")
		default:
			fmt.Println(name, err.Error())
		}
	}
	_, _, e := syscall.Syscall(unix.SYS_BPF, 0, 0, 0)
	report("bpf", e)
	_, _, e = syscall.Syscall(unix.SYS_KEYCTL, 0, 0, 0)
	report("keyctl", e)
	_, _, e = syscall.Syscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)
	report("io_uring_setup", e)
	// unshare of a mount namespace: refused by Landlock's domain (no
	// capability), whatever the filter says.
	_, _, e = syscall.Syscall(unix.SYS_UNSHARE, unix.CLONE_NEWNS, 0, 0)
	report("unshare", e)
	_, _, e = syscall.Syscall(unix.SYS_GETPID, 0, 0, 0)
	report("getpid", e)
	os.Exit(0)
}

// TestGitView: in a view with a session's git view, the agent commits on
// its branch (its objects land in its own layer, its ref in its own ref
// directory), but rewriting an existing object or moving another
// session's branch changes only its own view: the repository is as it
// was.
func TestGitView(t *testing.T) {
	m := nsManager(t)
	base := t.TempDir()
	repo, wt, views := filepath.Join(base, "repo"), filepath.Join(base, "wt"), filepath.Join(base, "views")
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=u", "-c", "user.email=u@example.invalid"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git(repo, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("# genuine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(repo, "add", ".")
	git(repo, "commit", "-q", "-m", "init")
	git(repo, "branch", "agentpool/other")
	git(repo, "worktree", "add", "-q", "-b", "agentpool/s1", wt)
	blob := git(repo, "rev-parse", "HEAD:README.md")
	other := git(repo, "rev-parse", "agentpool/other")
	common := filepath.Join(repo, ".git")
	view := sandbox.GitView{ObjectsUpper: filepath.Join(views, "upper"), ObjectsWork: filepath.Join(views, "work"),
		Refs: filepath.Join(views, "refs"), Logs: filepath.Join(views, "logs")}
	for _, d := range []string{view.ObjectsUpper, view.ObjectsWork, view.Refs, view.Logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	head := git(repo, "rev-parse", "agentpool/s1")
	if err := os.WriteFile(filepath.Join(view.Refs, "s1"), []byte(head+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{
		Sandbox: backends.SandboxSpec{Enabled: true}, Worktree: wt, Exe: "/bin/sh", PATH: os.Getenv("PATH"),
		Git: sandbox.GitPaths{CommonDir: common, AdminDir: filepath.Join(common, "worktrees", "wt"), Branch: "agentpool/s1", View: view},
	})
	obj := filepath.Join(common, "objects", blob[:2], blob[2:])
	line := fmt.Sprintf(`set -e
export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@example.invalid GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@example.invalid
echo work > work.txt && git add work.txt && git commit -q -m agent && echo committed
printf 'forged' > %[1]s.new && mv -f %[1]s.new %[1]s && echo rewrote
git update-ref refs/heads/agentpool/other HEAD 2>&1 | head -c 0; echo moved-other=$?
git cat-file -p %[2]s >/dev/null 2>&1 || echo "its own view sees its forgery"`, obj, blob)
	_, cmd, out := startIn(t, m, sandbox.JailConfig{Path: []string{"s1", "git"}, Policy: &pol, Session: "s1", TmpRoot: t.TempDir()}, line, wt)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "committed") || !strings.Contains(out.String(), "rewrote") {
		t.Fatalf("agent output %q; want its commit and its rewrite to succeed in its view", out)
	}
	if got := git(repo, "cat-file", "-p", blob); got != "# genuine" {
		t.Errorf("the repository's README blob = %q after the agent rewrote it in its view; want it unchanged", got)
	}
	if got := git(repo, "rev-parse", "agentpool/other"); got != other {
		t.Errorf("another session's branch moved: %s; want %s", got, other)
	}
	if got := git(repo, "rev-parse", "agentpool/s1"); got != head {
		t.Errorf("the session's branch in the repository moved to %s before any import; want %s", got, head)
	}
	private, _ := os.ReadFile(filepath.Join(view.Refs, "s1"))
	if strings.TrimSpace(string(private)) == head {
		t.Errorf("the agent's commit did not move its own ref in its view")
	}
	layers, _ := filepath.Glob(filepath.Join(view.ObjectsUpper, sandbox.GitLayerPrefix+"*"))
	if len(layers) != 1 {
		t.Fatalf("layers %q; want the launch's one", layers)
	}
	// The worktree's own reflog names the agent's commit until the daemon
	// imports it (worktree.Manager.ImportAgentHistory): --no-reflogs.
	if fsck, err := exec.Command("git", "-C", repo, "fsck", "--no-dangling", "--no-reflogs").CombinedOutput(); err != nil {
		t.Errorf("git fsck of the repository: %v\n%s", err, fsck)
	}
}

// TestDescribeEgressNetwork: a jail in namespaces reports the network
// mode its egress proxy enforces, a list that names hosts included (for
// which Landlock sets no rule); without namespaces, Landlock's.
func TestDescribeEgressNetwork(t *testing.T) {
	wt := t.TempDir()
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{
		Sandbox:  backends.SandboxSpec{Enabled: true, Network: backends.NetworkList, Hosts: []string{"api.example.com:443"}},
		Worktree: wt, Exe: "/bin/sh", PATH: os.Getenv("PATH"), Home: t.TempDir(),
	})
	for _, tc := range []struct {
		name string
		m    *sandbox.Manager
		want string
	}{
		{"namespaces", nsManager(t), backends.NetworkList},
		{"landlock only", open(t, sandbox.Config{NoNamespaces: true}), backends.NetworkAll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := tc.m.NewJail(sandbox.JailConfig{Path: []string{"s1", "agent"}, Policy: &pol,
				Egress: &sandbox.EgressView{Socket: "/nonexistent/e.sock", Network: backends.NetworkList}})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Release()
			if d := j.Describe(); d.Network != tc.want {
				t.Errorf("Describe() = %+v; want network %q", d, tc.want)
			}
		})
	}
}

// TestGrantThroughSymlinkRefused: a granted path that is a symlink into a
// secret (or the daemon's home) is refused, as the secret itself is.
func TestGrantThroughSymlinkRefused(t *testing.T) {
	home := t.TempDir()
	daemon := filepath.Join(home, "daemon")
	for _, d := range []string{filepath.Join(home, ".ssh"), daemon, filepath.Join(home, "ok")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{".tool": ".ssh", ".state": "daemon", ".fine": "ok"} {
		if err := os.Symlink(filepath.Join(home, target), filepath.Join(home, link)); err != nil {
			t.Fatal(err)
		}
	}
	res := sandbox.PolicyFor(sandbox.PolicyInput{
		Sandbox:  backends.SandboxSpec{Enabled: true, Write: []string{filepath.Join(home, ".tool"), filepath.Join(home, ".state"), filepath.Join(home, ".fine")}},
		Worktree: t.TempDir(), Exe: "/bin/sh", PATH: os.Getenv("PATH"), Home: home, Protect: []string{daemon},
	})
	var refused []string
	for _, n := range res.Notes {
		refused = append(refused, filepath.Base(n.Path))
	}
	slices.Sort(refused)
	if !slices.Equal(refused, []string{".state", ".tool"}) || !slices.Contains(res.Policy.Write, filepath.Join(home, ".fine")) {
		t.Errorf("refused %q, write %q; want .state and .tool refused, .fine granted", refused, res.Policy.Write)
	}
}

// totalMemKB is the machine's memory in KiB (MemTotal).
func totalMemKB() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// TestSystemReadable: the system directories every view shows are where a
// secret of the daemon's must not lie.
func TestSystemReadable(t *testing.T) {
	for path, want := range map[string]string{
		"/opt/agentpool/cluster.key": "/opt", "/etc/agentpool.key": "/etc", "/usr/local/x": "/usr",
		"/home/u/.agentpool/cluster.key": "", "/var/lib/agentpool/key": "", "/proc/self/environ": "",
	} {
		if got := sandbox.SystemReadable(path); got != want {
			t.Errorf("SystemReadable(%q) = %q; want %q", path, got, want)
		}
	}
}
