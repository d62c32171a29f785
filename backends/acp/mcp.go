package acp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/backends"
)

// mcpServers turns the spec's MCP servers into the SDK's, in name order,
// leaving out those whose transport the agent's capabilities lack (every
// agent takes stdio; http and sse only when its mcpCapabilities say so).
// The list is never nil: the schema rejects a null mcpServers.
func mcpServers(servers backends.MCPServers, caps acpsdk.McpCapabilities) ([]acpsdk.McpServer, []string, []backends.MCPSkipped) {
	out := []acpsdk.McpServer{}
	var names []string
	var skipped []backends.MCPSkipped
	for _, name := range servers.Names() {
		s := servers[name]
		switch t := s.Transport(); t {
		case backends.MCPStdio:
			env := make([]acpsdk.EnvVariable, 0, len(s.Env))
			for _, k := range sortedKeys(s.Env) {
				env = append(env, acpsdk.EnvVariable{Name: k, Value: s.Env[k]})
			}
			args := s.Args
			if args == nil {
				args = []string{}
			}
			out = append(out, acpsdk.McpServer{Stdio: &acpsdk.McpServerStdio{Name: name, Command: s.Command, Args: args, Env: env}})
		case backends.MCPHTTP, backends.MCPSSE:
			if t == backends.MCPHTTP && !caps.Http || t == backends.MCPSSE && !caps.Sse {
				skipped = append(skipped, backends.MCPSkipped{Name: name, Transport: t,
					Reason: fmt.Sprintf("the agent does not take MCP servers over %s (its agentCapabilities.mcpCapabilities.%s is not true)", t, t)})
				continue
			}
			headers := make([]acpsdk.HttpHeader, 0, len(s.Headers))
			for _, k := range sortedKeys(s.Headers) {
				headers = append(headers, acpsdk.HttpHeader{Name: k, Value: s.Headers[k]})
			}
			if t == backends.MCPHTTP {
				out = append(out, acpsdk.McpServer{Http: &acpsdk.McpServerHttpInline{Name: name, Type: t, Url: s.URL, Headers: headers}})
			} else {
				out = append(out, acpsdk.McpServer{Sse: &acpsdk.McpServerSseInline{Name: name, Type: t, Url: s.URL, Headers: headers}})
			}
		default:
			skipped = append(skipped, backends.MCPSkipped{Name: name, Transport: t, Reason: fmt.Sprintf("unknown transport %q", t)})
			continue
		}
		names = append(names, name)
	}
	return out, names, skipped
}

// setMCP records which servers the agent got by method, and says so in
// an EventMCP (names only), when the session has any.
func (b *Backend) setMCP(method string, names []string, skipped []backends.MCPSkipped, sharing []backends.MCPSharing) {
	b.mu.Lock()
	b.info.MCPServers, b.info.MCPSkipped = names, skipped
	b.mu.Unlock()
	if len(names)+len(skipped) == 0 {
		return
	}
	if len(skipped) > 0 {
		b.logger.Warn("MCP servers not passed to the agent", "method", method, "skipped", skipped)
	}
	if names == nil {
		names = []string{}
	}
	b.cfg.OnEvent(backends.NewEvent(backends.EventMCP, b.cfg.Spec.Provider, backends.MCPData{Method: method, Servers: names, Skipped: skipped, Sharing: sharing}))
}

// withPlan returns servers with the servers of plan added under names of
// their own: every secret the wire may carry, for redactWire.
func withPlan(servers backends.MCPServers, plan *backends.MCPPlan) backends.MCPServers {
	if plan == nil {
		return servers
	}
	all := servers.Clone()
	if all == nil {
		all = backends.MCPServers{}
	}
	for k, v := range plan.HTTP {
		all["http:"+k] = v
	}
	for k, v := range plan.Stdio {
		all["stdio:"+k] = v
	}
	return all
}

// minEchoSecret is the shortest secret redactWire looks for in lines other
// than the ones that pass the servers: a shorter one would mask ordinary
// text ("v" in every "version").
const minEchoSecret = 6

// redactWire returns wire, if set, with the secrets of servers (the values
// of their env and headers) replaced by backends.Redacted: in the
// mcpServers of the requests that pass them, and, for secrets of at least
// minEchoSecret bytes, wherever else they appear (an agent repeating one).
func redactWire(wire func(bool, []byte), servers backends.MCPServers) func(bool, []byte) {
	if wire == nil || len(servers) == 0 {
		return wire
	}
	var encoded [][]byte
	for _, s := range servers.Secrets() {
		raw, _ := json.Marshal(s) // a string always encodes
		if raw = raw[1 : len(raw)-1]; len(raw) >= minEchoSecret {
			encoded = append(encoded, raw)
		}
	}
	mask := []byte(backends.Redacted)
	return func(inbound bool, line []byte) {
		if !inbound && bytes.Contains(line, []byte(`"mcpServers"`)) {
			line = redactMCPParams(line)
		}
		for _, e := range encoded {
			if bytes.Contains(line, e) {
				line = bytes.ReplaceAll(line, e, mask)
			}
		}
		wire(inbound, line)
	}
}

// redactMCPParams returns a request line with the value of every env and
// header of its params' mcpServers replaced by backends.Redacted; a line
// it cannot read is replaced whole.
func redactMCPParams(line []byte) []byte {
	var msg map[string]any
	if json.Unmarshal(line, &msg) != nil {
		return []byte(`{"unreadable line with mcpServers": "` + backends.Redacted + `"}`)
	}
	params, _ := msg["params"].(map[string]any)
	servers, _ := params["mcpServers"].([]any)
	for _, s := range servers {
		srv, _ := s.(map[string]any)
		for _, key := range []string{"env", "headers"} {
			list, _ := srv[key].([]any)
			for _, v := range list {
				if kv, ok := v.(map[string]any); ok {
					kv["value"] = backends.Redacted
				}
			}
		}
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if enc.Encode(msg) != nil {
		return []byte(`{"unreadable line with mcpServers": "` + backends.Redacted + `"}`)
	}
	return bytes.TrimRight(out.Bytes(), "\n")
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
