package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// connectUnix is a step dialling the unix socket addr (a path, or "@name"
// for an abstract one).
func connectUnix(addr string) agenttest.Step {
	return sys(agenttest.SysOp{Op: agenttest.OpConnect, Network: "unix", Addr: addr})
}

// connectTCP is a step dialling addr over TCP.
func connectTCP(addr string) agenttest.Step {
	return sys(agenttest.SysOp{Op: agenttest.OpConnect, Addr: addr})
}

// shell is a step running a shell line.
func shell(line string) agenttest.Step {
	return sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", line}})
}

// proxyTalk is a step sending request to the egress proxy at its port on
// the agent's loopback.
func proxyTalk(request string) agenttest.Step {
	return sys(agenttest.SysOp{Op: agenttest.OpTalk, Addr: fmt.Sprintf("127.0.0.1:%d", sandbox.EgressProxyPort), Content: request})
}

// proxyConnect is a step asking the egress proxy for a tunnel to target.
func proxyConnect(target string) agenttest.Step {
	return proxyTalk("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n")
}

// absentLine is a shell line printing "absent P" or "present P" for
// each path.
func absentLine(paths ...string) string {
	return `for p in ` + strings.Join(paths, " ") + `; do if test -e "$p"; then echo "present $p"; else echo "absent $p"; fi; done`
}

// absentOutput is what absentLine prints when none of paths exists.
func absentOutput(paths ...string) string {
	var b strings.Builder
	for _, p := range paths {
		b.WriteString("absent " + p + "\n")
	}
	return b.String()
}

// attackSockets: the user's unix sockets are not in the agent's view. A
// tmux-like server's socket in a directory only its user may enter, the
// session's runtime directory (D-Bus), X11's and Docker's sockets are
// missing (ENOENT); an abstract socket belongs to the host's network
// namespace, not the agent's (ECONNREFUSED).
//
// Under Landlock alone (ABI 7 and before), connect(2) to a path socket
// is not mediated: the agent reached the tmux server (the directory's
// mode did not stop a root daemon's agent, which kept its capabilities,
// nor would it an agent of the socket's own user), and D-Bus, X11 and
// docker.sock alike. Only the abstract socket was refused, by Landlock's
// scope (ABI 6, EPERM; open before ABI 6).
func attackSockets(t *testing.T, w *world) worldAttack {
	t.Helper()
	dir, err := os.MkdirTemp("", "tmux-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	mkdirMode(t, dir, 0o700)
	tmux := listenHost(t, "unix", filepath.Join(dir, "default"), "")
	w.own(t, dir, filepath.Join(dir, "default"))
	abstract := "@agentpool-world-" + randomName()
	abs := listenHost(t, "unix", abstract, "")
	tmux.live(t)
	abs.live(t)
	runUser := fmt.Sprintf("/run/user/%d", w.uid())
	bus := standIn(t, w, runUser, 0o700, "bus")
	x11 := standIn(t, w, "/tmp/.X11-unix", 0o777|os.ModeSticky, "X77")
	const docker = "/var/run/docker.sock"
	standInSocket(t, docker)
	paths := []string{dir, runUser, "/tmp/.X11-unix", docker}
	return worldAttack{
		name: "sockets",
		steps: []agenttest.Step{
			connectUnix(filepath.Join(dir, "default")), connectUnix(abstract),
			connectUnix(bus), connectUnix(x11), connectUnix(docker),
			shell(absentLine(paths...)),
		},
		check: func(t *testing.T, w *world, id string, chunks []string) {
			checkSys(t, chunks,
				sysWant{"connect", "ENOENT", ""}, sysWant{"connect", "ECONNREFUSED", ""},
				sysWant{"connect", "ENOENT", ""}, sysWant{"connect", "ENOENT", ""}, sysWant{"connect", "ENOENT", ""},
				sysWant{"exec", "ok", absentOutput(paths...)})
			// The host's side: only the test's own dial reached them.
			if n := tmux.accepted.Load(); n != 1 {
				t.Errorf("the tmux-like server accepted %d connections; want only the test's", n)
			}
			if n := abs.accepted.Load(); n != 1 {
				t.Errorf("the abstract socket accepted %d connections; want only the test's", n)
			}
		},
	}
}

// attackLoopback: the host's loopback services and the daemon's own port
// are not on the agent's loopback (ECONNREFUSED); through the egress
// proxy, a CONNECT or a plain HTTP request to either is refused (403),
// and each refusal is a network.refused event of the session naming the
// host, the port and the entry that would allow it.
//
// Under Landlock alone net rules are ports, not addresses: an agent whose
// network was "all" connected to the loopback service and to the
// daemon's API (which then only its token stopped); one whose network
// was "none" was refused with EACCES, and nothing said so in the events.
// There was no proxy to ask.
func attackLoopback(t *testing.T, w *world) worldAttack {
	t.Helper()
	srv := listenHost(t, "tcp", "127.0.0.1:0", "hello from the host\n")
	port := srv.l.Addr().(*net.TCPAddr).Port
	loop, local := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("localhost:%d", port)
	return worldAttack{
		name: "loopback",
		steps: []agenttest.Step{
			connectTCP(loop), connectTCP(w.addr),
			proxyConnect(w.addr),
			proxyTalk("GET http://" + w.addr + "/v1/sessions HTTP/1.1\r\nHost: " + w.addr + "\r\nConnection: close\r\n\r\n"),
			proxyConnect(loop), proxyConnect(local),
		},
		check: func(t *testing.T, w *world, id string, chunks []string) {
			const forbidden = "HTTP/1.1 403 Forbidden\r\n"
			got := checkSys(t, chunks,
				sysWant{"connect", "ECONNREFUSED", ""}, sysWant{"connect", "ECONNREFUSED", ""},
				sysWant{"talk", "ok", forbidden}, sysWant{"talk", "ok", forbidden},
				sysWant{"talk", "ok", forbidden}, sysWant{"talk", "ok", forbidden})
			for i, want := range map[int]string{
				2: w.addr + " is the daemon's own address", 3: w.addr + " is the daemon's own address",
				4: `the entry "` + loop + `"`, 5: `the entry "` + local + `"`,
			} {
				if !strings.Contains(got[i].Data, want) {
					t.Errorf("step %d: the proxy answered %q; want it to say %q", i, got[i].Data, want)
				}
			}
			waitRefusals(t, w, id,
				refusedEvent{Host: "127.0.0.1", Port: uint16(w.port), Allow: w.addr},
				refusedEvent{Host: "127.0.0.1", Port: uint16(port), Allow: loop},
				refusedEvent{Host: "localhost", Port: uint16(port), Allow: local})
			if w.user == nil {
				// The CLI shows each refusal as a line of its own.
				out, err := w.d.cli("events", id)
				n := 0
				for _, l := range strings.Split(out, "\n") {
					if strings.Contains(l, " network.refused ") && (strings.Contains(l, strconv.Itoa(port)) || strings.Contains(l, strconv.Itoa(w.port))) {
						n++
					}
				}
				if err != nil || n != 4 {
					t.Errorf("agentpool events %s: %v\n%s\nwant the 4 refusals shown", id, err, out)
				}
			}
			if n := srv.accepted.Load(); n != 0 {
				t.Errorf("the host's loopback server accepted %d connections from the agent", n)
			}
		},
	}
}

// attackListedLoopback: a loopback service the provider lists
// ("localhost:PORT" in sandbox.network) answers at the same port on the
// agent's own loopback, forwarded, and through a CONNECT; the daemon's
// port stays refused.
//
// Under Landlock alone a listed port was open on every address of the
// host, not only the listed service's.
func attackListedLoopback(t *testing.T, w *world) worldAttack {
	t.Helper()
	srv := listenHost(t, "tcp", "127.0.0.1:0", "hello from the host\n")
	port := srv.l.Addr().(*net.TCPAddr).Port
	loop, local := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("localhost:%d", port)
	return worldAttack{
		name:    "listed-loopback",
		sandbox: map[string]any{"write": []string{"~/.fake-agent"}, "network": []string{local}},
		steps: []agenttest.Step{
			sys(agenttest.SysOp{Op: agenttest.OpTalk, Addr: loop}),
			proxyConnect(local),
			proxyConnect(w.addr),
			connectTCP(w.addr),
		},
		check: func(t *testing.T, w *world, id string, chunks []string) {
			checkSys(t, chunks,
				sysWant{"talk", "ok", "hello from the host\n"},
				sysWant{"talk", "ok", "HTTP/1.1 200 Connection established\r\n\r\nhello from the host\n"},
				sysWant{"talk", "ok", "HTTP/1.1 403 Forbidden\r\n"},
				sysWant{"connect", "ECONNREFUSED", ""})
			waitRefusals(t, w, id, refusedEvent{Host: "127.0.0.1", Port: uint16(w.port), Allow: w.addr})
			if n := srv.accepted.Load(); n != 2 {
				t.Errorf("the listed loopback server accepted %d connections; want the agent's 2", n)
			}
		},
	}
}

// attackProcesses: a process of the host holding a secret in its
// environment is not in the agent's PID namespace: no /proc entry, no
// environ, no command line; the agent sees only its own few processes.
//
// Under Landlock alone a root daemon's agent listed every process of the
// host and read the process's command line and its environ, the secret
// with it.
func attackProcesses(t *testing.T, w *world) worldAttack {
	t.Helper()
	secret := "SECRET=" + randomName()
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), secret)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The kernel lets Start return while exec still lays out the new
	// environment: look until it is there.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid))
		if err == nil && strings.Contains(string(b), secret) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host's own view of the secret process: %v, %q; want its environ", err, b)
		}
	}
	proc := "/proc/" + strconv.Itoa(cmd.Process.Pid)
	return worldAttack{
		name: "processes",
		steps: []agenttest.Step{
			sys(agenttest.SysOp{Op: agenttest.OpRead, Path: proc + "/environ"}),
			sys(agenttest.SysOp{Op: agenttest.OpRead, Path: proc + "/cmdline"}),
			shell(absentLine(proc)),
			shell(`for p in /proc/[0-9]*; do echo "${p#/proc/} $(cat $p/comm 2>/dev/null)"; done`),
			shell(`cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c '^SECRET='`),
		},
		check: func(t *testing.T, w *world, id string, chunks []string) {
			got := checkSys(t, chunks,
				sysWant{"read", "ENOENT", ""}, sysWant{"read", "ENOENT", ""},
				sysWant{"exec", "ok", absentOutput(proc)},
				sysWant{"exec", "ok", ""},
				sysWant{"exec", "ok", "0\n"})
			ps := strings.Split(strings.TrimSpace(got[3].Data), "\n")
			t.Logf("the agent's processes: %q", ps)
			if len(ps) > 8 || !strings.HasPrefix(got[3].Data, "1 ") || strings.Contains(got[3].Data, "sleep") {
				t.Errorf("the agent sees the processes %q; want its own few, from pid 1, not the host's", ps)
			}
		},
	}
}

// noCapsStatus are the capability lines and NoNewPrivs of
// /proc/self/status for a process without any capability that can gain
// none.
const noCapsStatus = "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n" +
	"CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n"

// attackCapabilities: the agent has no capability, can gain none
// (NoNewPrivs), and reads the system's password hashes empty.
//
// Under Landlock alone a root daemon's agents kept the daemon's
// capabilities and read /etc/shadow.
func attackCapabilities(t *testing.T, w *world) worldAttack {
	t.Helper()
	shadow, shadowErr := os.ReadFile("/etc/shadow")
	return worldAttack{
		name: "capabilities",
		steps: []agenttest.Step{
			shell(`grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status`),
			sys(agenttest.SysOp{Op: agenttest.OpRead, Path: "/etc/shadow"}),
		},
		check: func(t *testing.T, w *world, id string, chunks []string) {
			want := sysWant{"read", "ok", ""}
			if os.IsNotExist(shadowErr) {
				want.status = "ENOENT"
			}
			got := checkSys(t, chunks, sysWant{"exec", "ok", noCapsStatus}, want)
			if got[0].Data != noCapsStatus {
				t.Errorf("the agent's status:\n%s\nwant:\n%s", got[0].Data, noCapsStatus)
			}
			if got[1].OK() && got[1].Data != "" {
				t.Errorf("the agent read /etc/shadow: %q", got[1].Data)
			}
			if shadowErr == nil && len(shadow) == 0 {
				t.Log("the host's /etc/shadow is empty: its check proves nothing here")
			}
		},
	}
}

// attackTerminal: a terminal the agent starts (ACP terminal/create) shares
// its world: the /tmp file the agent wrote, which the host's /tmp does
// not have, and its loopback, where the terminal serves what the agent
// reaches, which the host's loopback does not have.
//
// Under Landlock alone /tmp was the host's and outside the agent's
// grants (EACCES), and a network "none" refused bind and connect (EACCES).
func attackTerminal(t *testing.T, w *world) worldAttack {
	t.Helper()
	file := "/tmp/agentpool-world-" + randomName()
	ready := file + ".ready"
	const port = 7419
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	const greeting = "hello from the terminal"
	serve := fmt.Sprintf("%s=%s GORACE=atexit_sleep_ms=0 exec %s %s '%s' %s", agenttest.EnvHelper, agenttest.HelperGreeter, w.exe, addr, greeting, ready)
	return worldAttack{
		name:    "terminal",
		sandbox: map[string]any{"write": []string{"~/.fake-agent"}, "network": "none"},
		steps: []agenttest.Step{
			sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: file, Content: "from the agent"}),
			{Terminal: &agenttest.Terminal{Command: "cat " + file}},
			{Terminal: &agenttest.Terminal{Command: serve, NoWait: true}},
			shell(`for i in $(seq 100); do if test -e ` + ready + `; then echo ready; exit 0; fi; sleep 0.1; done; echo timeout`),
			sys(agenttest.SysOp{Op: agenttest.OpTalk, Addr: addr}),
		},
		check: func(t *testing.T, w *world, id string, chunks []string) {
			checkSys(t, chunks,
				sysWant{"write", "ok", ""}, sysWant{"exec", "ok", "ready\n"},
				sysWant{"talk", "ok", greeting})
			read := false
			for _, c := range chunks {
				read = read || strings.HasPrefix(c, "terminal output: from the agent exit: ")
			}
			if !read {
				t.Errorf("the terminal did not read the agent's %s: %q", file, chunks)
			}
			if _, err := os.Stat(file); err == nil {
				t.Errorf("the agent's %s is in the host's /tmp", file)
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				_ = c.SetDeadline(time.Now().Add(time.Second))
				b := make([]byte, 64)
				n, _ := c.Read(b)
				_ = c.Close()
				if strings.Contains(string(b[:n]), "terminal") {
					t.Errorf("the terminal's server answers on the host's loopback: %q", b[:n])
				}
			}
		},
	}
}

// attackHistory: the agent rewrites the object of the base commit's
// README.md under its old id and moves another session's branch, then
// commits on its own branch.
//
// With write access to the shared object store and ref directory (before
// the session's own git view) the rewrite reached the user's checkout and
// the other branch moved.
func attackHistory(t *testing.T, w *world) worldAttack {
	t.Helper()
	git := func(args ...string) string {
		t.Helper()
		// The repository may be another user's (the unprivileged daemon's).
		out, err := exec.Command("git", append([]string{"-c", "safe.directory=*", "-C", w.repo}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("branch", "-f", "agentpool/other")
	blob := git("rev-parse", "HEAD:README.md")
	other := git("rev-parse", "agentpool/other")
	obj := filepath.Join(w.repo, ".git", "objects", blob[:2], blob[2:])
	return worldAttack{
		name: "history",
		steps: []agenttest.Step{
			shell(fmt.Sprintf(`printf 'defaced\n' > /tmp/x && forged=$(git hash-object -w /tmp/x) &&
cp "$(git rev-parse --git-path objects)/$(echo $forged | cut -c1-2)/$(echo $forged | cut -c3-)" %[1]s.new && mv -f %[1]s.new %[1]s && echo rewrote`, obj)),
			shell("git update-ref refs/heads/agentpool/other HEAD && echo moved"),
			shell("echo mine > agent.txt && git add agent.txt && git commit -q -m 'agent commit' && git log -1 --format=%s"),
		},
		check: func(t *testing.T, w *world, id string, chunks []string) {
			checkSys(t, chunks, sysWant{"exec", "ok", "rewrote\n"}, sysWant{"exec", "ok", "moved\n"}, sysWant{"exec", "ok", "agent commit\n"})
			if show := git("show", "HEAD:README.md"); show != "# repo" {
				t.Errorf("git show HEAD:README.md in the user's checkout = %q; want the genuine text", show)
			}
			if got := git("rev-parse", "agentpool/other"); got != other {
				t.Errorf("another session's branch moved to %s; want %s", got, other)
			}
			if out, err := exec.Command("git", "-c", "safe.directory=*", "-C", w.repo, "fsck", "--no-dangling").CombinedOutput(); err != nil {
				t.Errorf("git fsck: %v\n%s", err, out)
			}
			for deadline := time.Now().Add(10 * time.Second); !strings.Contains(git("log", "--format=%s", "agentpool/"+id), "agent commit"); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the agent's commit is not on agentpool/%s", id)
				}
			}
		},
	}
}
