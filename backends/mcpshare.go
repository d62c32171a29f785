package backends

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// MCPSharing says how an agent got one stdio MCP server: the daemon's
// shared copy (over http or through the stdio relay) or its own.
type MCPSharing struct {
	Name string `json:"name"`
	// Shared is true when the agent reaches the daemon's copy.
	Shared bool `json:"shared"`
	// Via is how it reaches it: MCPHTTP or "relay" (the agentpool
	// mcp-relay program, for an agent that takes stdio servers only).
	Via string `json:"via,omitempty"`
	// Reason says why the agent starts its own copy.
	Reason string `json:"reason,omitempty"`
}

// MCPViaRelay is MCPSharing.Via for an agent that reaches a shared server
// through the stdio relay.
const MCPViaRelay = "relay"

// MCPPlan is what an ACP agent is given in place of its servers when the
// daemon shares some of them: which set depends on whether the agent takes
// http servers, which it says only in its answer to initialize.
type MCPPlan struct {
	// HTTP are the servers for an agent whose mcpCapabilities.http is
	// true: each shared server as an http server of the daemon's.
	HTTP MCPServers
	// Stdio are the servers for any other agent: each shared server as
	// the stdio relay to the daemon's.
	Stdio MCPServers
	// Sharing says how each stdio server of the session was given, by
	// name, for the agent's mcp event; Via is filled in by the backend.
	Sharing []MCPSharing
}

// Servers returns the set for an agent that takes http servers or not,
// and Sharing with Via set accordingly.
func (p *MCPPlan) Servers(takesHTTP bool) (MCPServers, []MCPSharing) {
	via := MCPViaRelay
	servers := p.Stdio
	if takesHTTP {
		via, servers = MCPHTTP, p.HTTP
	}
	sharing := slices.Clone(p.Sharing)
	for i := range sharing {
		if sharing[i].Shared {
			sharing[i].Via = via
		}
	}
	return servers, sharing
}

// Unshared returns why the daemon must not run s once for every agent
// that names it, or "" when it may: s is not a stdio server, is marked
// "shared": false, or names the session's files (a relative path, or a
// path inside worktree, in an argument or an environment value). worktree
// is the session's worktree, "" when none is known.
func (s MCPServer) Unshared(worktree string) string {
	if s.Transport() != MCPStdio {
		return "not a stdio server"
	}
	if s.Shared != nil && !*s.Shared {
		return `marked "shared": false`
	}
	if field, why := s.sessionPath(worktree); why != "" {
		return field + " " + why + ": the server works on the session's files"
	}
	return ""
}

// shareProblem refuses "shared": true on a server that names the
// session's files, and a sandbox on one that is never shared.
func (s MCPServer) shareProblem() (field, msg string) {
	if s.Shared != nil && *s.Shared {
		if f, why := s.sessionPath(""); why != "" {
			return "shared", fmt.Sprintf("true, but %s %s: a shared server runs in a state directory of its own, "+
				"never in a session's worktree (name an absolute path outside it, or leave \"shared\" out)", f, why)
		}
	}
	if s.Shared != nil && !*s.Shared && s.Sandbox != nil {
		return "sandbox", `only for a server the daemon runs: one marked "shared": false is started by the agent, in its confinement`
	}
	if s.Sandbox != nil {
		for _, p := range append(slices.Clone(s.Sandbox.Read), s.Sandbox.Write...) {
			if strings.HasPrefix(p, "$WORKTREE") {
				return "sandbox", fmt.Sprintf("%q: a shared server has no worktree", p)
			}
		}
	}
	return "", ""
}

// sessionPath returns the first argument or environment value of s that
// names a relative path or a path inside worktree, and what it is.
func (s MCPServer) sessionPath(worktree string) (field, why string) {
	check := func(v string) string {
		for _, c := range pathCandidates(v) {
			switch {
			case c == "." || c == ".." || strings.HasPrefix(c, "./") || strings.HasPrefix(c, "../"):
				return fmt.Sprintf("%q is a relative path", v)
			case strings.HasPrefix(c, "$WORKTREE") || strings.HasPrefix(c, "${WORKTREE}"):
				return fmt.Sprintf("%q names the worktree", v)
			case worktree != "" && filepath.IsAbs(c) && within(filepath.Clean(c), worktree):
				return fmt.Sprintf("%q is inside the session's worktree", v)
			}
		}
		return ""
	}
	for i, a := range s.Args {
		if why := check(a); why != "" {
			return fmt.Sprintf("args[%d]", i), why
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if why := check(s.Env[k]); why != "" {
			return "env." + k, why
		}
	}
	return "", ""
}

// pathCandidates are the parts of an argument that may be paths: the
// whole, the value of a --flag=value, and each element of a
// colon-separated list.
func pathCandidates(v string) []string {
	out := []string{v}
	if _, val, ok := strings.Cut(v, "="); ok && strings.HasPrefix(v, "-") {
		out = append(out, val)
	}
	if strings.Contains(v, ":") && !strings.Contains(v, "://") {
		out = append(out, strings.Split(v, ":")...)
	}
	return out
}

func within(path, dir string) bool {
	dir = filepath.Clean(dir)
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// Clone returns a copy of s that shares nothing with it.
func (s SandboxSpec) Clone() SandboxSpec {
	s.Read = slices.Clone(s.Read)
	s.Write = slices.Clone(s.Write)
	s.MakeDirs = slices.Clone(s.MakeDirs)
	s.Sockets = slices.Clone(s.Sockets)
	s.Ports = slices.Clone(s.Ports)
	s.Hosts = slices.Clone(s.Hosts)
	return s
}
