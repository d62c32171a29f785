package wiring

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/egress"
)

// mcpJailRoot names the jails of the shared MCP servers in the cgroup
// tree: session ids never start with an underscore.
const mcpJailRoot = "_mcp"

// MCPJail makes the jail a shared MCP server starts in (mcpshare's
// Config.Jail): a cgroup of its own, and the Landlock rules and namespaces
// of an agent, from the server's "sandbox" (default: read the system,
// write its state directory stateDir, any network through the egress
// proxy). The daemon's home, its secrets and every worktree stay out of
// its reach; stateDir is granted as an agent's worktree is.
func (c Confiner) MCPJail(id string, def backends.MCPServer, stateDir string) (backends.Jail, error) {
	if c.Sandbox == nil {
		return nil, nil
	}
	sb := backends.SandboxSpec{Enabled: true, Network: backends.NetworkAll}
	if def.Sandbox != nil {
		sb = def.Sandbox.Clone()
	}
	for _, list := range []*[]string{&sb.Read, &sb.Write, &sb.Sockets} {
		for i, p := range *list {
			if rest, ok := strings.CutPrefix(p, "~/"); ok && c.Home != "" {
				(*list)[i] = filepath.Join(c.Home, rest)
			}
		}
	}
	exe := def.Command
	if !filepath.IsAbs(exe) {
		if p, err := lookPathIn(exe, os.Getenv("PATH")); err == nil {
			exe = p
		}
	}
	var pol *sandbox.Policy
	if sb.Enabled {
		in := sandbox.PolicyInput{Sandbox: sb, Worktree: stateDir, Exe: exe, Args: def.Args, PATH: os.Getenv("PATH"), Home: c.Home}
		for _, p := range c.Protect {
			in.Protected = append(in.Protected, sandbox.Protected{Path: p, What: whatDaemonHome})
		}
		for _, p := range c.Secrets {
			in.Protected = append(in.Protected, sandbox.Protected{Path: p, What: whatDaemonSecret})
		}
		res := sandbox.PolicyFor(in)
		pol = &res.Policy
	}
	cfg := sandbox.JailConfig{Path: []string{mcpJailRoot, id}, Policy: pol, Session: mcpJailRoot + "-" + id, TmpRoot: c.TmpRoot}
	if c.viewed(pol) {
		ev, closeEgress, err := c.Egress.open(sb, egress.Meta{Session: mcpJailRoot, Provider: id}, nil)
		if err != nil {
			return nil, err
		}
		cfg.Egress, cfg.Released = ev, closeEgress
	}
	j, err := c.Sandbox.NewJail(cfg)
	if err != nil {
		if cfg.Released != nil {
			cfg.Released()
		}
		return nil, fmt.Errorf("jail of shared MCP server %s: %w", id, err)
	}
	return j, nil
}

// lookPathIn finds a program named without a slash in path.
func lookPathIn(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH", name)
}
