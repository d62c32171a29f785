package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// mcpFlag collects the --mcp NAME=COMMAND [ARGS...] of `session new`:
// stdio MCP servers without environment (a command line is readable by
// every local user: secrets go in a --mcp-json file).
type mcpFlag struct{ servers backends.MCPServers }

func (f *mcpFlag) String() string { return strings.Join(f.servers.Names(), ",") }

// Set adds one server: NAME=COMMAND, then its arguments split on spaces.
func (f *mcpFlag) Set(v string) error {
	name, line, ok := strings.Cut(v, "=")
	fields := strings.Fields(line)
	if !ok || strings.TrimSpace(name) == "" || len(fields) == 0 {
		return fmt.Errorf("want NAME=COMMAND [ARGS...], e.g. --mcp 'files=mcp-server-filesystem .'")
	}
	if f.servers == nil {
		f.servers = backends.MCPServers{}
	}
	if _, dup := f.servers[name]; dup {
		return fmt.Errorf("MCP server %q given twice", name)
	}
	s := backends.MCPServer{Command: fields[0]}
	if len(fields) > 1 {
		s.Args = fields[1:]
	}
	f.servers[name] = s
	return nil
}

// mcpServersOf returns the servers of a --mcp-json file ("-": stdin), an
// object keyed by name as "mcp_servers" is in providers.json, plus those
// of --mcp; a name given by both is refused.
func (c *cli) mcpServersOf(file string, flags backends.MCPServers) (backends.MCPServers, error) {
	out := flags.Clone()
	if file == "" {
		return out, nil
	}
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(io.LimitReader(c.stdin, 1<<20))
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("--mcp-json: %w", err)
	}
	var fromFile backends.MCPServers
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fromFile); err != nil {
		return nil, fmt.Errorf("--mcp-json %s: want an object of MCP servers keyed by name "+
			"({\"files\": {\"command\": \"mcp-server-filesystem\", \"args\": [\".\"], \"env\": {...}}}): %w", file, err)
	}
	if err := fromFile.Validate("mcp_servers"); err != nil {
		return nil, fmt.Errorf("--mcp-json %s: %w", file, err)
	}
	for name, s := range fromFile {
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("MCP server %q is in both --mcp and --mcp-json", name)
		}
		if out == nil {
			out = backends.MCPServers{}
		}
		out[name] = s
	}
	return out, nil
}

// renderMCP prints a session's own MCP servers (values redacted by the
// daemon: only the names of variables and headers are shown) and which
// servers each of its running agents got.
func (c *cli) renderMCP(s pool.Session) {
	if len(s.MCPServers) > 0 {
		fmt.Fprintln(c.stdout, "\nMCP servers of the session (values of env and headers are never shown):")
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		for _, name := range s.MCPServers.Names() {
			m := s.MCPServers[name]
			where, keys, what := strings.TrimSpace(m.Command+" "+strings.Join(m.Args, " ")), m.Env, "env"
			if m.Transport() != backends.MCPStdio {
				where, keys, what = m.URL, m.Headers, "headers"
			}
			extra := ""
			if len(keys) > 0 {
				extra = what + ": " + strings.Join(slices.Sorted(maps.Keys(keys)), ", ")
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", name, m.Transport(), where, extra)
		}
		_ = tw.Flush()
	}
	var lines []string
	for _, a := range s.Agents {
		if len(a.MCPServers) > 0 {
			lines = append(lines, fmt.Sprintf("  %s\t%s", a.Agent, strings.Join(a.MCPServers, ", ")))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintln(c.stdout, "\nMCP servers each running agent got:")
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		for _, l := range lines {
			fmt.Fprintln(tw, l)
		}
		_ = tw.Flush()
	}
}

// mcpSummary is an mcp event in a few words: the servers the agent got,
// and those it could not take.
func mcpSummary(ev backends.Event) string {
	var d backends.MCPData
	_ = json.Unmarshal(ev.Data, &d)
	s := "MCP servers " + strings.Join(d.Servers, ", ")
	if len(d.Servers) == 0 {
		s = "no MCP server"
	}
	s += sharingSummary(d.Sharing) // cli_mcpshare.go
	for i, sk := range d.Skipped {
		sep := ", not "
		if i == 0 {
			sep = "; not "
		}
		s += sep + sk.Name + " (" + sk.Transport + ": " + sk.Reason + ")"
	}
	return oneLine(s, 240)
}
