package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/agentpool/agentpool/acpserver"
)

// acpServe runs `agentpool acp`: an ACP agent on stdin and stdout that
// serves the pool's sessions to an editor, a client of the running daemon
// found as every client command finds it. stdout is the protocol stream:
// everything else goes to stderr.
func (c *cli) acpServe(ctx context.Context, args []string) error {
	fs := c.flagSet("acp", `acp [--agent ID] [--log-level LEVEL]

Speaks the Agent Client Protocol (as an agent) on stdin and stdout, so that
an editor (Zed, JetBrains, Neovim, ...) runs its threads as pool sessions:
each thread is a session on its own worktree and branch of the repository
holding the editor's folder, adopted from a spare when one is kept, and it
outlives the editor. The thread's "Agent" option chooses the agent. It is a
client of the running daemon (found as the other commands find it, or
through AGENTPOOL_HOME, AGENTPOOL_ADDR and AGENTPOOL_TOKEN); without one,
the editor is told how to start it. See docs/editors.md.`)
	agent := fs.String("agent", defaultAgent, "the agent of new sessions (a provider id; default: providers.json's \"default_agent\", else demo)")
	level := fs.String("log-level", "warn", "the level of the log written to stderr: debug, info, warn or error")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("acp: --log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: lv}))
	srv, err := acpserver.New(acpserver.Config{
		Connect: func(context.Context) (acpserver.API, error) {
			api, err := c.freshClient()
			if err != nil {
				return nil, err
			}
			return api, nil
		},
		DefaultAgent: *agent,
		Version:      strings.TrimSpace(version),
		Commands:     c.acpCommands(),
		GitTopLevel:  gitTopLevel,
		StartHint:    "start it with: " + c.self() + " serve",
		Logger:       logger,
	})
	if err != nil {
		return err
	}
	if err := srv.Serve(ctx, c.stdin, c.stdout); err != nil && ctx.Err() == nil {
		return fmt.Errorf("acp: %w", err)
	}
	return nil
}

// acpCommands are the pool's own slash commands in an editor's thread:
// each runs the CLI command of the same name on the thread's session and
// answers with what it prints.
func (c *cli) acpCommands() []acpserver.Command {
	cmd := func(name, desc, hint string, words ...string) acpserver.Command {
		return acpserver.Command{Name: name, Description: desc, Hint: hint,
			Run: func(ctx context.Context, session, args string) (string, error) {
				return c.captured(ctx, words[0], append(append(words[1:len(words):len(words)], session), strings.Fields(args)...))
			}}
	}
	return []acpserver.Command{
		cmd("diff", "show what the session changed in its worktree", "[--stat] [--turn N]", "diff"),
		cmd("merge", "merge the session's branch into its base", "[--into BRANCH] [--squash | --rebase]", "session", "merge"),
		cmd("pr", "push the session's branch and open a pull request", "[--base BRANCH] [--title TEXT] [--draft]", "session", "pr"),
		cmd("restore", "put the worktree back to the state before turn N (undoing it and later turns), or with --after to the state it left", "--turn N [--after]", "restore"),
		cmd("status", "show the session: its agents, branch, worktree and usage", "", "session", "show"),
	}
}

// captured runs a client command with its output (stdout and stderr)
// captured, and no input.
func (c *cli) captured(ctx context.Context, cmd string, args []string) (string, error) {
	var out bytes.Buffer
	sub := &cli{env: c.env, stdin: strings.NewReader(""), stdout: &out, stderr: &out}
	_, err := sub.run(ctx, cmd, args)
	return out.String(), err
}
