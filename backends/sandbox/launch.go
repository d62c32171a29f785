package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/agentpool/agentpool/backends"
)

// LauncherCommand is the hidden agentpool subcommand that runs Launch.
const LauncherCommand = "sandbox-exec"

// EnvLauncher, set to "1" in a process's environment, makes a test binary
// act as the launcher (see MaybeLaunch). Launch removes it before it execs
// the program.
const EnvLauncher = "AGENTPOOL_SANDBOX_EXEC"

// EnvJail marks every process of a jail, for the subreaper fallback's
// sweep: "<tree name>/<jail path>".
const EnvJail = "AGENTPOOL_JAIL"

// exitLaunchFailed is the launcher's exit status when it cannot apply a
// required policy or exec the program (as a shell's "cannot execute").
const exitLaunchFailed = 126

// ExitDenied is the launcher's exit status when, once restricted, it
// cannot read a file the program cannot run without (Policy.Check): the
// script of an interpreter command. Its stderr then has a deniedLine.
const ExitDenied = 77

// deniedLine is the launcher's line for a path it cannot read under the
// policy it applied, a %q of the path in it; ExplainStart parses it.
const deniedLine = "agentpool sandbox: cannot read %q under the sandbox (%s)\n"

// LandlockABI returns the kernel's Landlock ABI version, 0 when it has
// none (or it is disabled at boot).
func LandlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// Launch is the launcher's main: args are a JSON Policy, the program's
// absolute path, and its argv (argv[0] first), or LateArg alone for a
// launcher started early, which reads them (with its environment and
// working directory) from a pipe first. It applies the policy to
// itself (Landlock rules, no-new-privs), then execs the program with the
// environment less EnvLauncher. It returns only on failure, with the exit
// status to use; the reason goes to stderr, which is the agent's.
func Launch(args []string) int {
	if len(args) == 1 && args[0] == LateArg {
		// Started early (Jail.StartEarly): the rest comes on the pipe.
		l, ok, err := readLate()
		if err != nil {
			fmt.Fprintln(os.Stderr, "agentpool sandbox-exec:", err)
			return exitLaunchFailed
		}
		if !ok {
			// The daemon did not need it after all: straight out (a
			// race-enabled test binary's exit waits a second).
			unix.Exit(0)
		}
		os.Clearenv()
		for _, kv := range l.Env {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				_ = os.Setenv(k, v)
			}
		}
		if err := os.Chdir(l.Dir); err != nil {
			fmt.Fprintln(os.Stderr, "agentpool sandbox-exec:", err)
			return exitLaunchFailed
		}
		args = l.Args
	}
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "agentpool sandbox-exec: usage: POLICY PATH ARGV0 [ARG...]")
		return 2
	}
	var p Policy
	if err := json.Unmarshal([]byte(args[0]), &p); err != nil {
		fmt.Fprintln(os.Stderr, "agentpool sandbox-exec: bad policy:", err)
		return 2
	}
	path, argv := args[1], args[2:]
	// Rules apply to the calling thread and what it execs: stay on it.
	runtime.LockOSThread()
	if p.Nice > 0 {
		lowerPriority(p.Nice)
	}
	// Which files exist is seen before the view hides what is not granted.
	named := namedFiles(argv[1:])
	check := existingFiles(p.Check)
	var rel *relays
	if p.View != nil {
		// First process of new namespaces, which the constructor made
		// (EnvUnshare): build what the program sees.
		if !unshared() {
			fmt.Fprintf(os.Stderr, "agentpool sandbox-exec: not in namespaces of its own (%s unset, or a binary built without cgo)\n", EnvUnshare)
			return exitLaunchFailed
		}
		setNotDumpable()
		cwd, err := os.Getwd()
		if err != nil {
			fmt.Fprintln(os.Stderr, "agentpool sandbox-exec:", err)
			return exitLaunchFailed
		}
		if err := buildView(p, p.View); err != nil {
			fmt.Fprintln(os.Stderr, "agentpool sandbox-exec:", err)
			return exitLaunchFailed
		}
		if err := loopbackUp(); err != nil {
			fmt.Fprintln(os.Stderr, "agentpool sandbox-exec:", err)
			return exitLaunchFailed
		}
		// Its own /tmp is its to write (what is granted beneath it keeps
		// its own mount's rights: a read-only one stays read-only).
		p.Write = append(p.Write, "/tmp", "/var/tmp")
		if p.View.Egress != nil {
			var err error
			if rel, err = listenRelays(p.View.Egress); err != nil {
				fmt.Fprintln(os.Stderr, "agentpool sandbox-exec:", err)
				return exitLaunchFailed
			}
		}
		// The directory the daemon started it in is at the same path in
		// the view.
		if err := os.Chdir(cwd); err != nil {
			fmt.Fprintln(os.Stderr, "agentpool sandbox-exec: the view has no", cwd)
			return exitLaunchFailed
		}
	}
	if p.Joined != "" {
		if mnt, err := os.Readlink("/proc/self/ns/mnt"); err != nil || mnt != p.Joined {
			fmt.Fprintf(os.Stderr, "agentpool sandbox-exec: not in the agent's namespaces (%s, want %s): this binary cannot join them\n", mnt, p.Joined)
			return exitLaunchFailed
		}
		// Its agent's /tmp, which it shares.
		p.Write = append(p.Write, "/tmp", "/var/tmp")
	}
	if p.NoRules {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "agentpool sandbox-exec: set no-new-privs:", err)
			return exitLaunchFailed
		}
	} else if err := Apply(p); err != nil {
		fmt.Fprintln(os.Stderr, "agentpool sandbox-exec:", err)
		if p.Required {
			return exitLaunchFailed
		}
	} else if !checkReadable(check, named) {
		return ExitDenied
	}
	if !p.NoRules {
		if err := applySeccomp(); err != nil {
			fmt.Fprintln(os.Stderr, "agentpool sandbox-exec:", err)
			if p.Required {
				return exitLaunchFailed
			}
		}
	}
	if err := dropCapabilities(); err != nil {
		fmt.Fprintln(os.Stderr, "agentpool sandbox-exec:", err)
		return exitLaunchFailed
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvLauncher+"=") && !strings.HasPrefix(kv, EnvNsenter+"=") && !strings.HasPrefix(kv, EnvUnshare+"=") {
			env = append(env, kv)
		}
	}
	if p.View != nil {
		code := runInit(path, argv, env)
		if rel != nil {
			rel.close()
		}
		// Straight out, as exec would have been: the namespace ends with
		// this process, and a race-enabled test binary's exit would
		// otherwise wait a second for its detector.
		unix.Exit(code)
	}
	err := syscall.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "agentpool sandbox-exec: exec %s: %v\n", path, err)
	return exitLaunchFailed
}

// lowerPriority sets the calling thread's nice value, which the program
// it execs keeps, and, when the launcher leads a session of its own (a
// terminal agent's), that session's autogroup's: with autogroups the
// kernel shares the CPUs between sessions first. A launcher in the
// daemon's session leaves the autogroup alone — it is the daemon's too.
// It runs before the Landlock rules, which make /proc read-only. A
// failure leaves the priority as it was.
func lowerPriority(nice int) {
	// Linux sets one thread's: the calling one, which execs or forks the
	// program, and the main one, whose value the process shows (the Go
	// runtime may run Launch on another thread than the main one).
	_ = unix.Setpriority(unix.PRIO_PROCESS, 0, nice)
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Getpid(), nice)
	if sid, err := unix.Getsid(0); err == nil && sid == unix.Getpid() {
		_ = os.WriteFile("/proc/self/autogroup", []byte(strconv.Itoa(nice)), 0)
	}
}

// namedFiles returns the regular files the arguments name by absolute
// path, alone or as an option's value ("--config=/x"), looked at before
// the rules apply.
func namedFiles(args []string) []string {
	var out []string
	for _, a := range args {
		if i := strings.IndexByte(a, '='); i >= 0 && strings.HasPrefix(a, "-") {
			a = a[i+1:]
		}
		if !strings.HasPrefix(a, "/") {
			continue
		}
		if fi, err := os.Stat(a); err == nil && fi.Mode().IsRegular() {
			out = append(out, a)
		}
	}
	return out
}

// checkReadable opens each file of check and of named for reading, under
// the rules just applied. A file of check that cannot be read is fatal: a
// line names it and checkReadable returns false. One of named (a file on
// the command line, say a config the agent loads) gets the same line but
// the program runs: it may not need to read it, and if it fails, the line
// in its stderr tail says why.
func checkReadable(check, named []string) bool {
	ok := true
	for _, f := range check {
		if err := openable(f); err != nil {
			fmt.Fprintf(os.Stderr, deniedLine, f, "the program runs it")
			ok = false
		}
	}
	if !ok {
		return false
	}
	for _, f := range named {
		if !slices.Contains(check, f) && openable(f) != nil {
			fmt.Fprintf(os.Stderr, deniedLine, f, "named on the command line")
		}
	}
	return true
}

// openable returns the error of opening f for reading when the sandbox
// (or the file's mode) refuses it, nil otherwise.
func openable(f string) error {
	fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err == nil {
		_ = unix.Close(fd)
		return nil
	}
	// A file that existed is missing in a view that does not show it.
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// existingFiles returns the files of paths that exist.
func existingFiles(paths []string) []string {
	var out []string
	for _, f := range paths {
		if _, err := os.Stat(f); err == nil {
			out = append(out, f)
		}
	}
	return out
}

// MaybeLaunch runs Launch and exits when the environment asks for the
// launcher (EnvLauncher=1) and returns otherwise. Test binaries that stand
// in for the agentpool binary call it first in TestMain.
func MaybeLaunch() {
	if os.Getenv(EnvLauncher) != "1" || len(os.Args) < 2 {
		return
	}
	os.Exit(Launch(os.Args[1:]))
}

// Apply sets no-new-privs and restricts the calling thread with p's
// Landlock rules, as far as the kernel's ABI allows (best effort: rights
// the kernel does not know are left out). It fails when the kernel has no
// Landlock at all and p.Required is set, or when a network mode needs an
// ABI the kernel lacks and p.Required is set.
//
// Only the calling thread is restricted: the launcher locks its OS thread
// and execs the program from it at once, and a new program has only that
// thread. (go-landlock's Config.Restrict restricts every thread of the Go
// runtime through psx, which costs milliseconds of signalling per launch
// and buys nothing here.)
func Apply(p Policy) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no-new-privs: %w", err)
	}
	abi := LandlockABI()
	if abi == 0 {
		if p.Required {
			return errors.New("the kernel has no Landlock and the provider's sandbox is required")
		}
		return errors.New("the kernel has no Landlock: running unconfined")
	}
	rs := newRuleset(abi)
	network := p.Network
	if p.View != nil || p.Joined != "" {
		// The network namespace and the egress proxy confine it.
		network = backends.NetworkAll
	}
	switch network {
	case "", backends.NetworkAll:
	case backends.NetworkNone, backends.NetworkList:
		if abi < 4 {
			if p.Required {
				return fmt.Errorf("network %q needs Landlock ABI 4, the kernel has %d", network, abi)
			}
			break
		}
		rs.attr.HandledAccessNet = ll.AccessNetConnectTCP
		if network == backends.NetworkNone {
			rs.attr.HandledAccessNet |= ll.AccessNetBindTCP
		}
	default:
		return fmt.Errorf("unknown network mode %q", network)
	}
	if p.View != nil || p.Joined != "" {
		// The PID and network namespaces scope signals and abstract
		// sockets to the agent's world, which its terminals share: an
		// agent stops the dev server one of them started.
		rs.attr.Scoped = 0
	}
	fd, err := ll.LandlockCreateRuleset(&rs.attr, 0)
	if err != nil {
		return fmt.Errorf("landlock: create ruleset: %w", err)
	}
	defer unix.Close(fd)
	for _, path := range p.Read {
		rs.addPath(fd, path, rs.read)
	}
	for _, path := range p.Write {
		rs.addPath(fd, path, rs.write)
	}
	for _, path := range p.Devices {
		rs.addPath(fd, path, rs.write|rs.attr.HandledAccessFS&ll.AccessFSIoctlDev)
	}
	if network == backends.NetworkList && rs.attr.HandledAccessNet != 0 {
		for _, port := range p.Ports {
			attr := ll.NetPortAttr{AllowedAccess: ll.AccessNetConnectTCP, Port: uint64(port)}
			if err := ll.LandlockAddNetPortRule(fd, &attr, 0); err != nil {
				return fmt.Errorf("landlock: allow port %d: %w", port, err)
			}
		}
	}
	if err := ll.LandlockRestrictSelf(fd, 0); err != nil {
		return fmt.Errorf("landlock: restrict: %w", err)
	}
	return nil
}

// ruleset is a Landlock ruleset being built for one ABI version.
type ruleset struct {
	attr        ll.RulesetAttr
	read, write uint64
}

// File access rights, by the ABI version that introduced them.
const (
	fsV1 = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSReadDir |
		ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeChar | ll.AccessFSMakeDir |
		ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym
	// fileRights are the rights that apply to a file (not a directory).
	fileRights = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
)

// newRuleset handles every file right the ABI knows (so nothing is
// allowed but what a rule grants) and, from ABI 6, scopes signals and
// abstract unix sockets to the agent's own domain: it can neither signal
// the daemon nor reach its abstract sockets.
func newRuleset(abi int) *ruleset {
	fs := uint64(fsV1)
	if abi >= 2 {
		fs |= ll.AccessFSRefer
	}
	if abi >= 3 {
		fs |= ll.AccessFSTruncate
	}
	if abi >= 5 {
		fs |= ll.AccessFSIoctlDev
	}
	rs := &ruleset{attr: ll.RulesetAttr{HandledAccessFS: fs}}
	if abi >= 6 {
		rs.attr.Scoped = ll.ScopeAbstractUnixSocket | ll.ScopeSignal
	}
	rs.read = fs & (ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir)
	rs.write = fs &^ ll.AccessFSIoctlDev
	return rs
}

// addPath grants access beneath path, limited to file rights when path is
// not a directory. A path that does not exist is skipped.
func (rs *ruleset) addPath(fd int, path string, access uint64) {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= fileRights
	}
	attr := ll.PathBeneathAttr{AllowedAccess: access, ParentFd: pfd}
	if err := ll.LandlockAddPathBeneathRule(fd, &attr, 0); err != nil {
		fmt.Fprintf(os.Stderr, "agentpool sandbox-exec: landlock: grant %s: %v\n", path, err)
	}
}
