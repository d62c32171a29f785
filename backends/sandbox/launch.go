package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
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
// absolute path, and its argv (argv[0] first). It applies the policy to
// itself (Landlock rules, no-new-privs), then execs the program with the
// environment less EnvLauncher. It returns only on failure, with the exit
// status to use; the reason goes to stderr, which is the agent's.
func Launch(args []string) int {
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
	if err := Apply(p); err != nil {
		fmt.Fprintln(os.Stderr, "agentpool sandbox-exec:", err)
		if p.Required {
			return exitLaunchFailed
		}
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvLauncher+"=") {
			env = append(env, kv)
		}
	}
	err := syscall.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "agentpool sandbox-exec: exec %s: %v\n", path, err)
	return exitLaunchFailed
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

// Apply sets no-new-privs and restricts the calling process with p's
// Landlock rules, as far as the kernel's ABI allows. It fails when the
// kernel has no Landlock at all and p.Required is set.
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
	rules := fsRules(p)
	if err := landlock.V11.BestEffort().RestrictPaths(rules...); err != nil {
		return fmt.Errorf("landlock paths: %w", err)
	}
	if err := restrictNet(p, abi); err != nil {
		return err
	}
	// Signals and abstract unix sockets stay within the agent's own domain:
	// it cannot signal the daemon nor reach its abstract sockets.
	if err := landlock.V11.BestEffort().RestrictScoped(); err != nil {
		return fmt.Errorf("landlock scopes: %w", err)
	}
	return nil
}

// fsRules turns p's paths into Landlock rules, choosing directory or file
// rights by what each path is; missing paths are skipped.
func fsRules(p Policy) []landlock.Rule {
	var rules []landlock.Rule
	add := func(paths []string, dir, file func(...string) landlock.FSRule, extra func(landlock.FSRule) landlock.FSRule) {
		for _, path := range paths {
			fi, err := os.Stat(path)
			if err != nil {
				continue
			}
			var r landlock.FSRule
			if fi.IsDir() {
				r = dir(path)
			} else {
				r = file(path)
			}
			if extra != nil {
				r = extra(r)
			}
			rules = append(rules, r)
		}
	}
	add(p.Read, landlock.RODirs, landlock.ROFiles, nil)
	add(p.Write, landlock.RWDirs, landlock.RWFiles, func(r landlock.FSRule) landlock.FSRule { return r.WithRefer() })
	add(p.Devices, landlock.RWDirs, landlock.RWFiles, func(r landlock.FSRule) landlock.FSRule { return r.WithIoctlDev() })
	return rules
}

// restrictNet applies the network mode: none refuses TCP connect and bind,
// ports allows connects to the listed ports only.
func restrictNet(p Policy, abi int) error {
	switch p.Network {
	case "", backends.NetworkAll:
		return nil
	case backends.NetworkNone, backends.NetworkPorts:
	default:
		return fmt.Errorf("unknown network mode %q", p.Network)
	}
	if abi < 4 {
		if p.Required {
			return fmt.Errorf("network %q needs Landlock ABI 4, the kernel has %d", p.Network, abi)
		}
		return nil
	}
	handled := landlock.AccessNetSet(ll.AccessNetConnectTCP)
	if p.Network == backends.NetworkNone {
		handled |= landlock.AccessNetSet(ll.AccessNetBindTCP)
	}
	cfg, err := landlock.NewConfig(handled)
	if err != nil {
		return fmt.Errorf("landlock network: %w", err)
	}
	var rules []landlock.Rule
	for _, port := range p.Ports {
		rules = append(rules, landlock.ConnectTCP(port))
	}
	if err := cfg.BestEffort().RestrictNet(rules...); err != nil {
		return fmt.Errorf("landlock network: %w", err)
	}
	return nil
}
