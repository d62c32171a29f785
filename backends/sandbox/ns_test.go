package sandbox_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
		ln, err := net.Listen(a[0], a[1])
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
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
		{"own /tmp", "echo mine > /tmp/f && cat /tmp/f && ls " + filepath.Dir(base), eq("mine\n" + filepath.Base(base)), "its own /tmp, showing only the grants' directories"},
		{"no write on the way to a grant", "{ echo x > " + filepath.Join(home, "daemon", "pwned") + "; } 2>&1 | grep -c '" + refused + "'", eq("1"), refused},
		{"no write in the home", "{ echo x > " + filepath.Join(home, "pwned") + "; } 2>&1 | grep -c '" + refused + "'; ls -A " + home + " | grep -c pwned", eq("1\n0"), refused},
		// claude-code saves ~/.claude.json through a temporary file beside
		// it, and writes it in place when that fails with EACCES.
		{"a granted file in the home, in place", "{ echo x > " + stateFile + ".tmp.1; } 2>&1 | grep -c '" + refused + "'; echo '{\"saved\":1}' > " + stateFile + " && echo ok",
			eq("1\nok"), refused + ", then ok"},
		{"a write kept on the way to a grant", "{ echo x > " + filepath.Join(base, "pwned") + "; } 2>&1 | grep -c 'Read-only'", eq("1"), "read-only"},
		{"session TMPDIR", `echo shared > "$TMPDIR/f" && cat ` + filepath.Join(tmpRoot, "s1", "f"), eq("shared"), "shared"},
		{"proxy variables", "echo $HTTPS_PROXY $ALL_PROXY $NO_PROXY", eq("http://127.0.0.1:3128 socks5h://127.0.0.1:3128 localhost,127.0.0.1,::1"), "the egress proxy"},
		{"egress through the proxy", talk(`CONNECT example.org:443 HTTP/1.1\r\n\r\n`, "127.0.0.1:3128"), contains("hello from example.org:443"), "hello from example.org:443"},
		{"forwarded loopback port", talk("", "127.0.0.1:11434"), contains("hello from 127.0.0.1:11434"), "hello from 127.0.0.1:11434"},
		{"exit status", "exit 7", eq(""), ""},
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
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waitFor(t, func() bool { return len(inPidNS(ns)) == 0 })
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
	for _, ns := range []string{"net", "mnt", "pid"} {
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
	_, term, out = startIn(t, m, sandbox.JailConfig{Path: []string{"s1", "term2"}, Policy: &pol, Session: "s1", TmpRoot: tmp, Join: agent}, `echo ran`, wt)
	if err := term.Wait(); err == nil || strings.Contains(out.String(), "ran") {
		t.Errorf("a terminal of a dead agent ran: %v, %q", err, out)
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
		ln, err := net.Listen("unix", p)
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
