package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/agentpool/agentpool/mcpserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpServe runs `agentpool mcp`: the Model Context Protocol server on
// stdin and stdout, a client of the running daemon with the user's
// credential, found as every client command finds it. stdout is the
// protocol stream: everything else goes to stderr.
func (c *cli) mcpServe(ctx context.Context, args []string) error {
	fs := c.flagSet("mcp", `mcp [--log-level LEVEL]

Speaks the Model Context Protocol on stdin and stdout, so that another
agent (Claude Code, Codex, Gemini CLI, ...) can delegate work to the pool:
list providers, create sessions, prompt them, wait for turns, read diffs,
answer permission requests, merge, close, and run attempts. It is a client
of the running daemon (found as the other commands find it, or through
AGENTPOOL_HOME, AGENTPOOL_ADDR and AGENTPOOL_TOKEN) with the user's
credential. Add it to an MCP client as the command "agentpool mcp"; see
docs/mcp.md for Claude Code and Codex.`)
	level := fs.String("log-level", "warn", "the level of the log written to stderr: debug, info, warn or error")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("mcp: --log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: lv}))
	wd, _ := os.Getwd()
	srv, err := mcpserver.New(mcpserver.Config{
		Connect: func(context.Context) (mcpserver.API, error) {
			api, err := c.freshClient()
			if err != nil {
				return nil, err
			}
			return api, nil
		},
		Version: strings.TrimSpace(version),
		WorkDir: wd,
		Logger:  logger,
	})
	if err != nil {
		return err
	}
	if api, err := c.client(); err != nil {
		logger.Warn("no daemon yet: tool calls will say why until one runs", "err", err)
	} else {
		logger.Info("serving MCP on stdio", "daemon", api.BaseURL)
	}
	t := &mcp.IOTransport{Reader: readCloser(c.stdin), Writer: nopWriteCloser{c.stdout}}
	if err := srv.Run(ctx, t); err != nil && ctx.Err() == nil {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}

// readCloser returns r as an io.ReadCloser (closing a non-closer does
// nothing).
func readCloser(r io.Reader) io.ReadCloser {
	if rc, ok := r.(io.ReadCloser); ok {
		return rc
	}
	return io.NopCloser(r)
}

// nopWriteCloser is a writer whose Close does nothing: the process's
// stdout stays open until it exits.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
