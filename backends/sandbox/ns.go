package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/backends"
)

// EnvNsenter, set to the pid of an agent's launcher in a process of the
// agentpool binary, makes it join that launcher's namespaces before the
// Go runtime starts (see nsenter.go): a terminal joins its agent's world.
// The launcher then checks it is in the namespace Policy.Joined names: a
// binary built without cgo has no constructor to join them.
const EnvNsenter = "AGENTPOOL_NSENTER"

// EnvUnshare, set in a launcher's environment to the niceness the
// program gets (Policy.Nice, "0" for none), makes the launcher make its
// own namespaces before its Go runtime starts (see unshare.go):
// the daemon then starts it with a plain vfork, not a clone into new
// namespaces, which copies the daemon's whole memory first. Launch
// removes it before it execs the program.
const EnvUnshare = "AGENTPOOL_UNSHARE"

// Secure bits (linux/securebits.h), which x/sys/unix lacks.
const (
	prSetSecurebits          = 28
	secbitNoroot             = 1 << 0
	secbitNorootLocked       = 1 << 1
	secbitNoSetuidFixup      = 1 << 2
	secbitNoSetuidFixupLockd = 1 << 3
	secbitKeepCapsLocked     = 1 << 5
	secbitNoAmbientRaise     = 1 << 6
	secbitNoAmbientRaiseLckd = 1 << 7
)

// dropCapabilities leaves the calling thread, and what it execs, with no
// capability at all, for good: the bounding set emptied (so that even a
// uid 0 program gains none at exec), ambient ones cleared, and the secure
// bits that give root its powers locked off. Without CAP_SETPCAP (an
// unprivileged daemon without namespaces) the thread has none to drop.
func dropCapabilities() error {
	var errs []error
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLockd |
		secbitKeepCapsLocked | secbitNoAmbientRaise | secbitNoAmbientRaiseLckd
	if err := unix.Prctl(prSetSecurebits, uintptr(bits), 0, 0, 0); err != nil && !errors.Is(err, unix.EPERM) {
		errs = append(errs, fmt.Errorf("securebits: %w", err))
	}
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break // past the kernel's last capability
			}
			if !errors.Is(err, unix.EPERM) {
				errs = append(errs, fmt.Errorf("drop capability %d from the bounding set: %w", c, err))
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		errs = append(errs, fmt.Errorf("clear ambient capabilities: %w", err))
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		errs = append(errs, fmt.Errorf("clear capabilities: %w", err))
	}
	return errors.Join(errs...)
}

// loopbackUp brings up the network namespace's loopback interface.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: bring up: %w", err)
	}
	return nil
}

// relays are the launcher's listeners on loopback inside the network
// namespace, each relaying its connections to the egress proxy.
type relays struct {
	lns []net.Listener
	wg  sync.WaitGroup
}

// listenRelays opens the egress proxy's port and the forwarded ports on
// the namespace's loopback. It runs before the capabilities are dropped
// (a forwarded port may be below 1024).
func listenRelays(e *EgressView) (*relays, error) {
	r := &relays{}
	listen := func(port uint16, target string) error {
		for _, host := range []string{"127.0.0.1", "[::1]"} {
			ln, err := net.Listen("tcp", host+":"+strconv.Itoa(int(port)))
			if err != nil {
				if host == "[::1]" {
					continue // no IPv6 on this kernel
				}
				return fmt.Errorf("egress: listen on %s:%d: %w", host, port, err)
			}
			r.lns = append(r.lns, ln)
			r.wg.Add(1)
			go r.serve(ln, target)
		}
		return nil
	}
	port := e.Port
	if port == 0 {
		port = EgressProxyPort
	}
	if err := listen(port, ""); err != nil {
		r.close()
		return nil, err
	}
	for _, f := range e.Forward {
		if f.Port == port {
			continue
		}
		if err := listen(f.Port, f.Target); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

func (r *relays) close() {
	for _, ln := range r.lns {
		_ = ln.Close()
	}
}

// serve relays each connection to the proxy's socket: as it is (the proxy
// port), or after a CONNECT to target (a forwarded port).
func (r *relays) serve(ln net.Listener, target string) {
	defer r.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		go relay(c, target)
	}
}

// relayDialTimeout bounds the connection to the proxy and its answer to a
// forwarded port's CONNECT.
const relayDialTimeout = 30 * time.Second

func relay(c net.Conn, target string) {
	defer c.Close()
	up, err := net.DialTimeout("unix", viewEgressSocket, relayDialTimeout)
	if err != nil {
		return
	}
	defer up.Close()
	var in io.Reader = up
	if target != "" {
		_ = up.SetDeadline(time.Now().Add(relayDialTimeout))
		if _, err := fmt.Fprintf(up, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
			return
		}
		br := bufio.NewReader(up)
		status, err := br.ReadString('\n')
		if err != nil || !strings.Contains(status, " 200") {
			return
		}
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\r\n" || line == "\n" {
				break
			}
		}
		_ = up.SetDeadline(time.Time{})
		in = br
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(c, in)
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	<-done
}

// initSignals are the signals the launcher, first process of the PID
// namespace, takes and drops: the daemon signals the whole process group
// (the program with it) and a terminal its foreground group, so the
// program gets each one itself; the launcher must outlive it.
var initSignals = []os.Signal{
	unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGWINCH, unix.SIGALRM, unix.SIGPIPE,
}

// runInit starts the program as the PID namespace's second process and
// stays its first: it reaps every orphan, and exits as the program does
// (128+n for a program killed by signal n), which ends every process left
// in the namespace. The program is started from the calling thread, whose
// Landlock domain, capabilities and no-new-privs it inherits.
func runInit(path string, argv, env []string) int {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, initSignals...)
	go func() {
		for range sigs {
		}
	}()
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{Env: env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentpool sandbox-exec: exec %s: %v\n", path, err)
		return exitLaunchFailed
	}
	// The program's stdin and stdout are its own: the daemon sees them
	// end when the program closes them.
	if null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		_ = unix.Dup3(null, 0, 0)
		_ = unix.Dup3(null, 1, 0)
		_ = unix.Close(null)
	}
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return exitLaunchFailed
		}
		if pid != proc.Pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// setNotDumpable keeps the launcher's memory and /proc entries from the
// program (same uid): it cannot ptrace the first process, whose other
// threads run the relays unrestricted.
func setNotDumpable() {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}

// egressEnv returns env with its proxy variables replaced by the egress
// proxy's address inside the namespace (none when e is nil: the network
// namespace then has no way out).
func egressEnv(env []string, e *EgressView) []string {
	out := make([]string, 0, len(env)+12)
	for _, kv := range env {
		// A confined program's proxy is the daemon's egress proxy or none,
		// never the provider's or the daemon's own (those are the
		// proxy's upstream).
		if name, _, _ := strings.Cut(kv, "="); !backends.ProxyEnv(name) {
			out = append(out, kv)
		}
	}
	if e == nil {
		return out
	}
	port := e.Port
	if port == 0 {
		port = EgressProxyPort
	}
	http := fmt.Sprintf("http://127.0.0.1:%d", port)
	socks := fmt.Sprintf("socks5h://127.0.0.1:%d", port)
	noProxy := "localhost,127.0.0.1,::1"
	for _, kv := range [][2]string{
		{"HTTP_PROXY", http}, {"HTTPS_PROXY", http}, {"ALL_PROXY", socks}, {"NO_PROXY", noProxy},
	} {
		out = append(out, kv[0]+"="+kv[1], strings.ToLower(kv[0])+"="+kv[1])
	}
	// Node 24 and later honour the variables above in fetch only when
	// asked to.
	return append(out, "NODE_USE_ENV_PROXY=1")
}

// probeTimeout bounds the start of the probe that tells whether programs
// can have namespaces of their own.
const probeTimeout = 10 * time.Second

// probeNamespaces starts the launcher as an agent's would be, in new
// namespaces building a view, running true(1) there: nil when that works.
func probeNamespaces(launcher, launcherEnv []string) error {
	truePath, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("no true(1) to probe with: %w", err)
	}
	raw, err := json.Marshal(Policy{NoRules: true, View: &View{}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	args := append(append(slices.Clone(launcher[1:]), string(raw), truePath), "true")
	cmd := exec.CommandContext(ctx, launcher[0], args...)
	cmd.Env = append(append(os.Environ(), launcherEnv...), EnvUnshare+"=0")
	cmd.Dir = "/"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if line := strings.TrimSpace(stderr.String()); line != "" {
			line, _, _ = strings.Cut(line, "\n")
			return fmt.Errorf("%s", strings.TrimPrefix(line, "agentpool sandbox-exec: "))
		}
		return fmt.Errorf("start in new namespaces: %w", err)
	}
	return nil
}
