package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"

	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/mcpshare"
)

// runMCPRelay is agentpool mcp-relay URL: the stdio MCP server an agent
// that takes no http servers runs to reach a server the daemon shares. It
// copies messages between its stdin and stdout and the daemon's address
// URL, with the credential in $AGENTPOOL_MCP_TOKEN (never an argument:
// every ps listing would show it). It reads nothing of the data directory.
func runMCPRelay(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp-relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: agentpool mcp-relay URL\n\n"+
			"Relays an MCP client on stdin and stdout to the daemon's shared MCP server at URL,\n"+
			"with the credential in $"+wiring.EnvMCPToken+". The daemon gives it to the agents\n"+
			"that take stdio MCP servers only; see docs/mcp.md.\n")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return exitError(2)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitError(2)
	}
	raw := fs.Arg(0)
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		return fmt.Errorf("mcp-relay: %q: want the daemon's http:// URL on loopback", raw)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("mcp-relay: %q: the daemon's shared servers are on loopback; refusing to send the credential elsewhere", raw)
	}
	token := os.Getenv(wiring.EnvMCPToken)
	if token == "" {
		return fmt.Errorf("mcp-relay: no credential in $%s (the daemon sets it for the agents it gives a shared server)", wiring.EnvMCPToken)
	}
	return mcpshare.Relay(ctx, raw, token, stdin, stdout)
}
