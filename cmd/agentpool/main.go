// Command agentpool is the agentpool daemon and its command-line client.
//
//	agentpool serve            run the daemon
//	agentpool version          print the version, the source revision and the Go version
//	agentpool demo-agent       (hidden) the built-in demo ACP agent, spoken to over stdio
//	agentpool sandbox-exec     (hidden) the launcher that confines an agent and execs it
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// version and revision are set at build time by make build, with
// -ldflags "-X main.version=... -X main.revision=...": git describe
// --always --dirty and the commit, so that a build with -buildvcs=false
// (which records no revision) still says what it was built from.
var (
	version  = "dev"
	revision = ""
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == sandbox.LauncherCommand {
		// The launcher: apply an agent's sandbox and exec it. It runs
		// before anything else so that it adds as little as possible to
		// the agent's start.
		os.Exit(sandbox.Launch(os.Args[2:]))
	}
	serve := len(os.Args) > 1 && os.Args[1] == "serve"
	if serve {
		hideSecrets()
		keepRunningWithoutOutput()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if !serve {
		// A client command stops at the first interrupt (a prompt cancels
		// its turn); a second one ends it at once, the default way.
		go func() {
			<-ctx.Done()
			stop()
		}()
	}
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(int(ee))
		}
		// An error may quote an agent's or a repository's words: escaped.
		fmt.Fprintln(os.Stderr, "agentpool:", termText(err.Error()))
		os.Exit(1)
	}
}

// keepRunningWithoutOutput keeps the daemon alive when its stdout or
// stderr goes away (a pipe to `tee` that a Ctrl-C ended first): Go kills
// a program that writes to a broken pipe on fd 1 or 2 with SIGPIPE unless
// it is notified of SIGPIPE, which would end the daemon in the middle of
// its shutdown, leaving daemon.json and its cgroups behind. Notified, the
// write fails with EPIPE, the log line is lost, and the shutdown goes on.
// The signal is caught rather than ignored, so that the agents it starts
// get SIGPIPE's default action back (an ignored signal would stay ignored
// across exec).
func keepRunningWithoutOutput() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// exitError ends the program with a status and no further message.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// usage is the binary's usage text, with self the command as invoked.
func usage(self string) string {
	return `agentpool keeps coding agents warm, one per (session, agent), each in its
session's own git worktree.

Usage:
  ` + self + ` <command> [flags]

Commands:
  serve        run the daemon
  mcp-relay    (run by agents) relay stdio to an MCP server the daemon shares
` + clientUsage + `  version      print the version, the source revision it was built from, the Go version

Run '` + self + ` <command> --help' for the flags of a command.
`
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	self := defaultSelf
	if len(os.Args) > 0 {
		self = invokedAs(os.Args[0])
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage(self))
		return exitError(2)
	}
	switch args[0] {
	case "demo-agent":
		// stdout is the protocol stream: nothing else may write to it.
		return agenttest.RunDemo()
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "mcp-relay":
		// Inside an agent's sandbox: no data directory to find.
		return runMCPRelay(ctx, args[1:], stdin, stdout, stderr) // mcprelay.go
	case "version", "--version":
		fmt.Fprint(stdout, versionText(version, revision, buildInfo())) // version.go
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage(self))
		return nil
	}
	cwd, _ := os.Getwd()
	home, from := findHome(os.Getenv, cwd, stderr)
	env := newClientEnv(home, os.Getenv)
	env.HomeFrom, env.Self, env.Cwd = from, self, cwd
	env.Daemons = daemonsDir(os.Getenv) // pointer.go
	handled, err := runClient(ctx, args[0], args[1:], env, stdin, stdout, stderr)
	if handled {
		return err
	}
	fmt.Fprintf(stderr, "agentpool: unknown command %q\n\n%s", args[0], usage(self))
	return exitError(2)
}
