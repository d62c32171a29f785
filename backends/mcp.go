package backends

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// MCP server transports, as MCPServer.Type.
const (
	// MCPStdio is a server the agent starts as a child process and talks
	// to over its stdin and stdout; every ACP agent supports it.
	MCPStdio = "stdio"
	// MCPHTTP is a server the agent reaches over streamable HTTP, for
	// agents whose mcpCapabilities.http is true.
	MCPHTTP = "http"
	// MCPSSE is a server the agent reaches over HTTP with server-sent
	// events, for agents whose mcpCapabilities.sse is true.
	MCPSSE = "sse"
)

// Redacted replaces every secret value (environment variables of stdio
// servers, headers of http and sse servers) wherever MCP servers are
// shown: the API, events, logs and the page.
const Redacted = "<redacted>"

// MCPServer is one Model Context Protocol server an ACP agent is asked to
// connect to in session/new, session/load and session/resume. Its name is
// the key it has in MCPServers. The values of Env and Headers are secrets:
// they are stored and passed to the agent, never shown (see Redact).
type MCPServer struct {
	// Type is MCPStdio ("" means stdio), MCPHTTP or MCPSSE.
	Type string `json:"type,omitempty"`
	// Command is the program of a stdio server: the agent starts it, in
	// its own confinement; a name without a slash is looked up in the
	// agent's PATH by the agent.
	Command string `json:"command,omitempty"`
	// Args are the arguments of a stdio server's program.
	Args []string `json:"args,omitempty"`
	// Env is added to a stdio server's environment.
	Env map[string]string `json:"env,omitempty"`
	// URL is where an http or sse server listens.
	URL string `json:"url,omitempty"`
	// Headers are sent with every request to an http or sse server.
	Headers map[string]string `json:"headers,omitempty"`
	// Shared, for a stdio server, says whether the daemon may run it once
	// for every agent that names it (see Unshared): nil lets the daemon
	// decide, false keeps one copy per agent, started by the agent, and
	// true insists (an error when it cannot be).
	Shared *bool `json:"shared,omitempty"`
	// Sandbox confines a server the daemon runs; nil is the default: read
	// the system, write the server's own state directory, any network.
	Sandbox *SandboxSpec `json:"sandbox,omitempty"`
}

// Transport returns the server's transport: Type, with "" read as stdio.
func (s MCPServer) Transport() string {
	if s.Type == "" {
		return MCPStdio
	}
	return s.Type
}

// Validate reports the first problem of s, naming the field under path
// (e.g. `mcp_servers.github.url`).
func (s MCPServer) Validate(path string) error {
	if field, msg := s.Problem(); msg != "" {
		return fmt.Errorf("%s.%s: %s", path, field, msg)
	}
	return nil
}

// Problem returns the first problem of s: the field concerned ("command",
// "env", "headers.X", ...) and what is wrong; msg is "" when there is none.
func (s MCPServer) Problem() (field, msg string) {
	switch s.Transport() {
	case MCPStdio:
		switch {
		case strings.TrimSpace(s.Command) == "":
			return "command", "a stdio server needs the program to run"
		case strings.ContainsRune(s.Command, 0):
			return "command", "contains a NUL byte"
		case s.URL != "":
			return "url", "only for http and sse servers (set \"type\")"
		case s.Headers != nil:
			return "headers", "only for http and sse servers (set \"type\")"
		}
		for i, a := range s.Args {
			if strings.ContainsRune(a, 0) {
				return fmt.Sprintf("args[%d]", i), "contains a NUL byte"
			}
		}
		if field, msg := s.shareProblem(); msg != "" {
			return field, msg
		}
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return "env", fmt.Sprintf("invalid environment variable name %q", k)
			}
			if strings.ContainsRune(s.Env[k], 0) {
				return "env." + k, "value contains a NUL byte"
			}
			if s.Env[k] == Redacted {
				return "env." + k, placeholderMsg
			}
		}
	case MCPHTTP, MCPSSE:
		switch {
		case !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://"):
			return "url", fmt.Sprintf("an %s server needs an http:// or https:// URL", s.Type)
		case strings.ContainsAny(s.URL, " \r\n\x00"):
			return "url", "contains a space, line break or NUL byte"
		case s.Command != "":
			return "command", "only for stdio servers"
		case s.Args != nil:
			return "args", "only for stdio servers"
		case s.Env != nil:
			return "env", fmt.Sprintf("only for stdio servers (an %s server takes \"headers\")", s.Type)
		case s.Shared != nil:
			return "shared", "only for stdio servers (the agent connects to an " + s.Type + " server itself)"
		case s.Sandbox != nil:
			return "sandbox", "only for stdio servers (the daemon runs no " + s.Type + " server)"
		}
		for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
			if !validHeaderName(k) {
				return "headers", fmt.Sprintf("invalid header name %q", k)
			}
			if strings.ContainsAny(s.Headers[k], "\r\n\x00") {
				return "headers." + k, "value contains a line break or NUL byte"
			}
			if s.Headers[k] == Redacted {
				return "headers." + k, placeholderMsg
			}
		}
	default:
		return "type", fmt.Sprintf("unknown transport %q (want \"stdio\", \"http\" or \"sse\")", s.Type)
	}
	return "", ""
}

// placeholderMsg refuses Redacted as a value: it is what a client read,
// not a secret; sending it back would replace the secret with it.
const placeholderMsg = "\"" + Redacted + "\" is what the API shows in place of a secret: send the real value, " +
	"or leave this key out (a merge patch keeps what it does not mention)"

// validHeaderName reports whether k is an HTTP header field name (a token).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if c > 0x7e || c <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return true
}

// MCPServers is a set of MCP servers keyed by name; in JSON, an object
// whose keys are the names.
type MCPServers map[string]MCPServer

// Maximum sizes of a set of MCP servers.
const (
	// MaxMCPServers is the most servers a provider or a session may name.
	MaxMCPServers = 64
	// maxMCPName is the longest server name.
	maxMCPName = 128
)

// Validate reports every problem of m, each naming its field under path
// ("mcp_servers" in a session create request), joined.
func (m MCPServers) Validate(path string) error {
	if len(m) > MaxMCPServers {
		return fmt.Errorf("%s: %d servers, at most %d", path, len(m), MaxMCPServers)
	}
	var errs []error
	for _, name := range m.Names() {
		p := path + "." + name
		if msg := CheckMCPName(name); msg != "" {
			errs = append(errs, fmt.Errorf("%s: %s", p, msg))
			continue
		}
		if err := m[name].Validate(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CheckMCPName returns why name cannot name an MCP server, or "".
func CheckMCPName(name string) string {
	switch {
	case strings.TrimSpace(name) == "":
		return "a server name must not be empty"
	case len(name) > maxMCPName:
		return fmt.Sprintf("a server name is at most %d bytes", maxMCPName)
	case strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return fmt.Sprintf("server name %q contains a control character", name)
	}
	return ""
}

// Names returns the names of m, sorted.
func (m MCPServers) Names() []string {
	return slices.Sorted(maps.Keys(m))
}

// Merge returns the servers of m with those of over added, a server of
// over replacing the one of m that has its name; nil when both are empty.
// Neither argument is changed.
func (m MCPServers) Merge(over MCPServers) MCPServers {
	if len(m)+len(over) == 0 {
		return nil
	}
	out := make(MCPServers, len(m)+len(over))
	for k, v := range m {
		out[k] = v.clone()
	}
	for k, v := range over {
		out[k] = v.clone()
	}
	return out
}

// Clone returns a deep copy of m.
func (m MCPServers) Clone() MCPServers {
	if m == nil {
		return nil
	}
	return m.Merge(nil)
}

func (s MCPServer) clone() MCPServer {
	s.Args = slices.Clone(s.Args)
	s.Env = maps.Clone(s.Env)
	s.Headers = maps.Clone(s.Headers)
	if s.Shared != nil {
		v := *s.Shared
		s.Shared = &v
	}
	if s.Sandbox != nil {
		sb := s.Sandbox.Clone()
		s.Sandbox = &sb
	}
	return s
}

// Redact returns a copy of m fit to be shown: every value of Env and
// Headers is Redacted (the names stay), and Type is always set.
func (m MCPServers) Redact() MCPServers {
	if m == nil {
		return nil
	}
	out := make(MCPServers, len(m))
	for k, v := range m {
		v = v.clone()
		v.Type = v.Transport()
		for e := range v.Env {
			v.Env[e] = Redacted
		}
		for h := range v.Headers {
			v.Headers[h] = Redacted
		}
		out[k] = v
	}
	return out
}

// Secrets returns the values of every Env and Headers entry of m that are
// not empty: what must never be shown.
func (m MCPServers) Secrets() []string {
	var out []string
	for _, v := range m {
		for _, s := range v.Env {
			if s != "" {
				out = append(out, s)
			}
		}
		for _, s := range v.Headers {
			if s != "" {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// MCPSkipped is an MCP server that was not passed to an agent, and why.
type MCPSkipped struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
	Reason    string `json:"reason"`
}

// MCPData is the payload of EventMCP: which servers an agent got, by name,
// and which it did not. It never holds a value of Env or Headers.
type MCPData struct {
	// Method is the ACP method that passed them: session/new,
	// session/load or session/resume.
	Method string `json:"method"`
	// Servers are the names of the servers passed, sorted.
	Servers []string `json:"servers"`
	// Skipped are the servers the agent cannot take.
	Skipped []MCPSkipped `json:"skipped,omitempty"`
	// Sharing says, for each stdio server given, whether the agent got
	// the daemon's shared copy or starts its own, and why.
	Sharing []MCPSharing `json:"sharing,omitempty"`
}
