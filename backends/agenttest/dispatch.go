package agenttest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Environment variables that turn a re-executed test binary into a helper.
const (
	EnvHelper = "AGENTPOOL_TEST_HELPER"
	EnvScript = "AGENTPOOL_TEST_SCRIPT"
)

// Helper names understood by Dispatch.
const (
	// HelperACP is the scripted ACP agent.
	HelperACP = "acp"
	// HelperSleeper sleeps forever ignoring SIGTERM (a grandchild).
	HelperSleeper = "sleeper"
	// HelperSetsidSleeper (argv: pidfile) calls setsid unless it already
	// leads a session, ignores SIGTERM, SIGHUP and SIGINT, appends its
	// "pid starttime" line to pidfile and sleeps forever.
	HelperSetsidSleeper = "setsid-sleeper"
	// HelperDaemonize (argv: pidfile) daemonizes: it starts a
	// HelperSetsidSleeper in a new session writing to pidfile, waits until
	// the sleeper has written its line, prints that line on stdout and
	// exits 0, orphaning the sleeper. Run it as a terminal's command (with
	// HelperEnv) to leave a descendant the terminal's kill must reach.
	HelperDaemonize = "daemonize"
	// HelperReplay replays the agent's side of the recorded ACP
	// transcript named by EnvTranscript (see ReplayTranscript, TranscriptSpec).
	HelperReplay = "replay"
	// HelperGreeter (argv: address greeting [readyfile]) listens on the
	// TCP address, creates readyfile once it does, and answers every
	// connection with the greeting and a hang-up, until killed: a
	// service for a Talk step to reach.
	HelperGreeter = "greeter"
)

// Dispatch runs the helper named by the environment, if any, and exits; it
// returns false in an ordinary test process. Call it first in TestMain:
//
//	func TestMain(m *testing.M) {
//		agenttest.Dispatch()
//		os.Exit(m.Run())
//	}
func Dispatch() bool {
	name := os.Getenv(EnvHelper)
	if name == "" {
		return false
	}
	switch name {
	case HelperACP:
		var s Script
		if raw := os.Getenv(EnvScript); raw != "" {
			if err := json.Unmarshal([]byte(raw), &s); err != nil {
				fmt.Fprintln(os.Stderr, "fake agent: bad script:", err)
				os.Exit(2)
			}
		}
		if err := Run(s, os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "fake agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case HelperSleeper:
		ignoreTermSignals()
		for {
			time.Sleep(time.Hour)
		}
	case HelperSetsidSleeper:
		setsidSleeperMain(os.Args[1:])
	case HelperDaemonize:
		daemonizeMain(os.Args[1:])
	case HelperReplay:
		replayMain()
	case HelperGreeter:
		greeterMain(os.Args[1:])
	default:
		fmt.Fprintln(os.Stderr, "unknown test helper", name)
		os.Exit(2)
	}
	return true
}

// Spec returns a launch Spec that runs the scripted agent with script s in
// the current test binary. Dir is left for the caller.
func Spec(provider string, s Script) backends.Spec {
	exe, err := os.Executable()
	if err != nil {
		panic(fmt.Sprintf("agenttest: executable: %v", err))
	}
	raw, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("agenttest: script: %v", err))
	}
	return backends.Spec{
		Provider: provider,
		Kind:     backends.KindACP,
		Path:     exe,
		Env:      []string{EnvHelper + "=" + HelperACP, EnvScript + "=" + string(raw)},
	}
}

// Env returns the environment that makes the test binary run helper name
// with script s, appended to the current environment.
func Env(name string, s Script) []string {
	raw, _ := json.Marshal(s)
	return append(os.Environ(), EnvHelper+"="+name, EnvScript+"="+string(raw))
}

// HelperEnv returns the variables (only those, not the current
// environment) that make the test binary run helper name, for a command
// such as a terminal's, whose environment adds to an inherited one.
func HelperEnv(name string) []string {
	return []string{EnvHelper + "=" + name}
}

func ignoreTermSignals() {
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
}

// spawnGrandchild starts a sleeper in this process's group and leaves it.
func spawnGrandchild() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), EnvHelper+"="+HelperSleeper)
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
