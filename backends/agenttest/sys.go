package agenttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Operations of a SysOp.
const (
	// OpWrite creates or truncates Path (mode 0644) and writes Content.
	OpWrite = "write"
	// OpRead reads Path.
	OpRead = "read"
	// OpMkdir makes the directory Path (mode 0755, parents must exist).
	OpMkdir = "mkdir"
	// OpRemove removes the file or empty directory Path.
	OpRemove = "remove"
	// OpRename renames Path to To.
	OpRename = "rename"
	// OpConnect dials Addr over Network ("127.0.0.1:PORT" over TCP by
	// default; a socket's path, or "@name" for an abstract one, over
	// "unix") and hangs up.
	OpConnect = "connect"
	// OpTalk dials like OpConnect, writes Content, and reports what the
	// peer sends until it hangs up or the timeout passes: an HTTP
	// CONNECT to a proxy, or a greeting.
	OpTalk = "talk"
	// OpExec runs Argv in Dir and reports its exit code and output.
	OpExec = "exec"
	// OpEnv reports the variables of the agent's environment that Names
	// name (a name, or a prefix ending in "*"), as `env | grep` would
	// show them to a hostile agent.
	OpEnv = "env"
	// OpSetsidChild starts a child (HelperSetsidSleeper) in a new session
	// that ignores SIGTERM, SIGHUP and SIGINT, sleeps forever and appends
	// its pid line to the pid file Path.
	OpSetsidChild = "setsid_child"
	// OpDaemon double-forks: an intermediate child (HelperDaemonize)
	// starts a setsid sleeper like OpSetsidChild and exits at once, so the
	// sleeper is orphaned and reparented away from the agent.
	OpDaemon = "daemon"
)

// Bounds of a SysOp.
const (
	// DefaultSysTimeout bounds connect, and talk's whole exchange.
	DefaultSysTimeout = 2 * time.Second
	// DefaultExecTimeout bounds exec.
	DefaultExecTimeout = 30 * time.Second
	// sysReadBytes, sysOutputBytes and sysTalkBytes bound what read,
	// exec and talk report.
	sysReadBytes   = 64
	sysOutputBytes = 256
	sysTalkBytes   = 1024
)

// SysOp is a Step made with the agent process's own system calls, not
// through the client, as a hostile agent would: confinement (cgroups,
// Landlock) shows in its result. The result is sent as the text of an
// agent_message_chunk in the format SysResult documents (to stderr only
// when there is no session yet, in Script.StartSteps), and is always
// logged to stderr too.
//
// Relative paths are left to the kernel: they are relative to the agent
// process's working directory (its Spec's Dir), not to the session's cwd.
// setsid_child and daemon re-execute the running binary as a helper, so
// they need a test binary whose TestMain calls Dispatch.
type SysOp struct {
	// Op is one of the Op constants.
	Op string `json:"op"`
	// Path is the file of write, read, mkdir, remove and rename, and the
	// pid file of setsid_child and daemon.
	Path string `json:"path,omitempty"`
	// To is the new name of rename.
	To string `json:"to,omitempty"`
	// Content is what write writes, and what talk sends.
	Content string `json:"content,omitempty"`
	// Addr is the address connect and talk dial.
	Addr string `json:"addr,omitempty"`
	// Network is the network of connect and talk: "tcp" (the default)
	// or "unix".
	Network string `json:"network,omitempty"`
	// Argv is the command exec runs, looked up in PATH.
	Argv []string `json:"argv,omitempty"`
	// Dir is the working directory of exec (default the agent's).
	Dir string `json:"dir,omitempty"`
	// Names are the variables env reports: names, or prefixes ending in
	// "*".
	Names []string `json:"names,omitempty"`
	// TimeoutMs bounds connect and talk (default DefaultSysTimeout) and
	// exec (default DefaultExecTimeout).
	TimeoutMs int `json:"timeout_ms,omitempty"`
	// KeepStdio makes the setsid_child inherit the agent's stdin, stdout
	// and stderr, holding the protocol pipes open after the agent dies.
	KeepStdio bool `json:"keep_stdio,omitempty"`
}

// sys runs op and reports its result.
func (a *agent) sys(op SysOp) {
	r := doSys(op)
	text := r.String()
	fmt.Fprintln(a.stderr, "fake agent:", text)
	a.mu.Lock()
	sid := a.sessionID
	a.mu.Unlock()
	if sid != "" {
		a.update(textUpdate("agent_message_chunk", text))
	}
}

// doSys runs op.
func doSys(op SysOp) SysResult {
	switch op.Op {
	case OpWrite:
		return sysResult(op.Op, os.WriteFile(op.Path, []byte(op.Content), 0o644), "")
	case OpRead:
		b, err := os.ReadFile(op.Path)
		return sysResult(op.Op, err, string(b[:min(len(b), sysReadBytes)]))
	case OpMkdir:
		return sysResult(op.Op, os.Mkdir(op.Path, 0o755), "")
	case OpRemove:
		return sysResult(op.Op, os.Remove(op.Path), "")
	case OpRename:
		return sysResult(op.Op, os.Rename(op.Path, op.To), "")
	case OpConnect:
		c, err := net.DialTimeout(op.network(), op.Addr, op.timeout(DefaultSysTimeout))
		if err == nil {
			err = c.Close()
		}
		return sysResult(op.Op, err, "")
	case OpTalk:
		return sysTalk(op)
	case OpExec:
		return sysExec(op)
	case OpEnv:
		var found []string
		for _, kv := range os.Environ() {
			if name, _, _ := strings.Cut(kv, "="); backends.MatchEnv(op.Names, name) {
				found = append(found, kv)
			}
		}
		return sysResult(op.Op, nil, strings.Join(found, "\n"))
	case OpSetsidChild:
		e, err := startSetsidSleeper(op.Path, op.KeepStdio)
		return sysResult(op.Op, err, pidDetail(e))
	case OpDaemon:
		e, err := daemonize(op.Path)
		return sysResult(op.Op, err, pidDetail(e))
	default:
		return sysResult(op.Op, fmt.Errorf("unknown sys op %q", op.Op), "")
	}
}

func (op SysOp) timeout(def time.Duration) time.Duration {
	if op.TimeoutMs > 0 {
		return time.Duration(op.TimeoutMs) * time.Millisecond
	}
	return def
}

func (op SysOp) network() string {
	if op.Network == "" {
		return "tcp"
	}
	return op.Network
}

// sysTalk dials op.Addr, sends op.Content and reports what comes back; a
// peer that keeps the connection open past the timeout is reported as
// far as it got.
func sysTalk(op SysOp) SysResult {
	deadline := time.Now().Add(op.timeout(DefaultSysTimeout))
	c, err := net.DialTimeout(op.network(), op.Addr, time.Until(deadline))
	if err != nil {
		return sysResult(op.Op, err, "")
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := io.WriteString(c, op.Content); err != nil {
		return sysResult(op.Op, err, "")
	}
	b, err := io.ReadAll(io.LimitReader(c, sysTalkBytes))
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout() && len(b) > 0) {
		return sysResult(op.Op, err, "")
	}
	return sysResult(op.Op, nil, string(b))
}

func pidDetail(e PidEntry) string {
	return "pid=" + strconv.Itoa(e.Pid) + " start=" + strconv.FormatUint(e.StartTime, 10)
}

// sysExec runs op.Argv; a command that ran is a success whatever its exit.
func sysExec(op SysOp) SysResult {
	if len(op.Argv) == 0 {
		return sysResult(op.Op, errors.New("exec: empty argv"), "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), op.timeout(DefaultExecTimeout))
	defer cancel()
	cmd := exec.CommandContext(ctx, op.Argv[0], op.Argv[1:]...)
	cmd.Dir = op.Dir
	cmd.WaitDelay = time.Second
	var out limitedBuffer
	out.max = sysOutputBytes
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return sysResult(op.Op, err, "")
	}
	detail := "exit=" + strconv.Itoa(cmd.ProcessState.ExitCode())
	if out.Len() > 0 {
		detail += " " + out.String()
	}
	return sysResult(op.Op, nil, detail)
}

// daemonize runs the test binary as HelperDaemonize and returns the entry
// of the sleeper it left behind.
func daemonize(pidfile string) (PidEntry, error) {
	exe, err := os.Executable()
	if err != nil {
		return PidEntry{}, err
	}
	cmd := exec.Command(exe, pidfile)
	cmd.Env = append(os.Environ(), EnvHelper+"="+HelperDaemonize)
	if os.Getenv("GORACE") == "" {
		// A race-enabled binary sleeps a second before exiting 0.
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = 4096, 4096
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = readyTimeout
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return PidEntry{}, fmt.Errorf("daemonize: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return PidEntry{}, err
	}
	return parsePidEntry(stdout.String())
}

// limitedBuffer keeps the first max bytes written to it and discards the
// rest, without failing the writer. It wraps rather than embeds its
// buffer, whose ReadFrom io.Copy would call, bypassing the bound.
type limitedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Len is the number of bytes kept.
func (b *limitedBuffer) Len() int { return b.buf.Len() }

// String returns the bytes kept.
func (b *limitedBuffer) String() string { return b.buf.String() }
