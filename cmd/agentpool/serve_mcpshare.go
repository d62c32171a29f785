package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/mcpshare"
)

// mcpShareDir, in the data directory, holds the state directories of the
// shared MCP servers, one per definition.
const mcpShareDir = "mcp"

// mcpShareFlags are serve's flags of the shared MCP servers.
func (m *Main) mcpShareFlags(fs *flag.FlagSet) {
	fs.DurationVar(&m.MCPIdleTimeout, "mcp-idle-timeout", mcpshare.DefaultIdleTimeout,
		"stop a shared MCP server no agent called for this long; it starts again on the next call (negative: never)")
	fs.BoolVar(&m.NoMCPShare, "no-mcp-share", os.Getenv("AGENTPOOL_MCP_SHARE") == "off",
		"give every agent its own copy of every stdio MCP server, as before shared servers ($AGENTPOOL_MCP_SHARE=off; see docs/mcp.md)")
}

// openMCPShare starts the manager of the shared MCP servers (no server
// runs until an agent calls one), unless --no-mcp-share.
func (m *Main) openMCPShare(home string, confiner wiring.Confiner) error {
	if m.NoMCPShare {
		return nil
	}
	sh, err := mcpshare.New(mcpshare.Config{Dir: filepath.Join(home, mcpShareDir), IdleTimeout: m.MCPIdleTimeout,
		Jail: confiner.MCPJail, Logger: m.Logger})
	if err != nil {
		return fmt.Errorf("shared MCP servers: %w", err)
	}
	m.mcpShare = sh
	return nil
}

// mcpShares is the manager for the API, nil when there is none.
func (m *Main) mcpShares() httpapi.MCPShares {
	if m.mcpShare == nil {
		return nil
	}
	return m.mcpShare
}

// closeMCPShare stops the shared servers, after the agents.
func (m *Main) closeMCPShare() {
	if m.mcpShare != nil {
		_ = m.mcpShare.Close()
	}
}
