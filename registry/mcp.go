package registry

import (
	"strings"

	"github.com/agentpool/agentpool/backends"
)

// mcpFields lists the fields of one server of an entry's "mcp_servers".
func mcpFields() []string {
	return []string{"type", "command", "args", "env", "url", "headers", "shared", "sandbox"}
}

// mcpServers decodes an entry's "mcp_servers": an object whose keys name
// the servers, each an object of mcpFields.
func (c *checker) mcpServers(n *node, path string) backends.MCPServers {
	if !c.want(n, kindObject, path) {
		return nil
	}
	if len(n.members) > backends.MaxMCPServers {
		c.add(n.off, path, "%d servers, at most %d", len(n.members), backends.MaxMCPServers)
		return nil
	}
	out := make(backends.MCPServers, len(n.members))
	for _, m := range n.members {
		sp := joinPath(path, m.key)
		if msg := backends.CheckMCPName(m.key); msg != "" {
			c.add(m.keyOff, sp, "%s", msg)
			continue
		}
		if s, ok := c.mcpServer(m.val, sp); ok {
			out[m.key] = s
		}
	}
	return out
}

// mcpServer decodes one server and checks it as a whole.
func (c *checker) mcpServer(n *node, path string) (backends.MCPServer, bool) {
	var s backends.MCPServer
	if !c.want(n, kindObject, path) {
		return s, false
	}
	ok := true
	at := make(map[string]*node, len(n.members))
	for _, m := range n.members {
		fp := joinPath(path, m.key)
		at[m.key] = m.val
		good := true
		switch m.key {
		case "type":
			s.Type, good = c.str(m.val, fp)
		case "command":
			s.Command, good = c.str(m.val, fp)
		case "url":
			s.URL, good = c.str(m.val, fp)
		case "args":
			s.Args, good = c.strList(m.val, fp)
		case "env":
			s.Env = c.stringMap(m.val, fp)
			good = s.Env != nil
		case "headers":
			s.Headers = c.stringMap(m.val, fp)
			good = s.Headers != nil
		case "shared":
			var b bool
			if b, good = c.boolean(m.val, fp); good {
				s.Shared = &b
			}
		case "sandbox":
			s.Sandbox = c.mcpSandbox(m.val, fp)
			good = s.Sandbox != nil
		default:
			c.unknown(m, fp, mcpFields())
			good = false
		}
		ok = ok && good
	}
	if !ok {
		return s, false
	}
	if field, msg := s.Problem(); msg != "" {
		key, _, _ := strings.Cut(field, ".")
		key, _, _ = strings.Cut(key, "[")
		off := n.off
		if v := at[key]; v != nil {
			off = v.off
		}
		c.add(off, joinPath(path, key)+strings.TrimPrefix(field, key), "%s", msg)
		return s, false
	}
	return s, true
}

// stringMap decodes an object of strings; nil when n is not one.
func (c *checker) stringMap(n *node, path string) map[string]string {
	if !c.want(n, kindObject, path) {
		return nil
	}
	out := make(map[string]string, len(n.members))
	for _, m := range n.members {
		if s, ok := c.str(m.val, joinPath(path, m.key)); ok {
			out[m.key] = s
		}
	}
	return out
}

// mcpSandbox decodes the "sandbox" of a server the daemon runs: the
// fields of an entry's sandbox, over the default (Landlock on, any
// network; the server's own state directory is always writable).
func (c *checker) mcpSandbox(n *node, path string) *backends.SandboxSpec {
	before := len(c.errs)
	e := c.sandbox(n, path)
	if e == nil || len(c.errs) > before {
		return nil
	}
	d := definition{sandbox: backends.SandboxSpec{Enabled: true, Network: backends.NetworkAll}}
	applySandbox(&d, e)
	sb := d.sandbox
	sb.MakeDirs = nil
	return &sb
}

// daemonMCPServers gives the document's top-level servers to every ACP
// provider, under its own: a provider's server replaces the daemon's of
// its name.
func daemonMCPServers(defs map[string]*definition, servers backends.MCPServers) {
	if len(servers) == 0 {
		return
	}
	for _, d := range defs {
		if d.kind == backends.KindACP {
			d.mcpServers = servers.Merge(d.mcpServers)
		}
	}
}
