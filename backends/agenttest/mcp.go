package agenttest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// MCPEchoPrefix starts the chunk of an MCPEcho step.
const MCPEchoPrefix = "mcp received: "

// MCPReceived is one MCP server as the fake agent received it in
// session/new, session/load or session/resume, with every env and header
// value replaced by its MCPDigest: the echo shows what was passed without
// putting a secret into the session's events.
type MCPReceived struct {
	Method  string            `json:"method"`
	Name    string            `json:"name"`
	Type    string            `json:"type,omitempty"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// MCPDigest is what an MCPEcho step shows of a secret value.
func MCPDigest(value string) string {
	sum := sha256.Sum256([]byte(value))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// ParseMCPEcho reads the servers out of an MCPEcho chunk's text.
func ParseMCPEcho(text string) ([]MCPReceived, error) {
	rest, ok := strings.CutPrefix(text, MCPEchoPrefix)
	if !ok {
		return nil, fmt.Errorf("not an MCP echo: %q", text)
	}
	var out []MCPReceived
	if err := json.Unmarshal([]byte(rest), &out); err != nil {
		return nil, fmt.Errorf("MCP echo: %w", err)
	}
	return out, nil
}

// recordMCP keeps the mcpServers of a session/new, session/load or
// session/resume request (params raw) for MCPEcho.
func (a *agent) recordMCP(method string, params json.RawMessage) {
	var p struct {
		MCPServers []struct {
			Name    string   `json:"name"`
			Type    string   `json:"type"`
			Command string   `json:"command"`
			Args    []string `json:"args"`
			URL     string   `json:"url"`
			Env     []struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			} `json:"env"`
			Headers []struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			} `json:"headers"`
		} `json:"mcpServers"`
	}
	_ = json.Unmarshal(params, &p)
	got := make([]MCPReceived, 0, len(p.MCPServers))
	var stdio []stdioServer
	for _, s := range p.MCPServers {
		if s.Command != "" {
			srv := stdioServer{name: s.Name, command: s.Command, args: s.Args}
			for _, e := range s.Env {
				srv.env = append(srv.env, e.Name+"="+e.Value)
			}
			stdio = append(stdio, srv)
		} else if s.URL != "" {
			srv := stdioServer{name: s.Name, url: s.URL}
			for _, h := range s.Headers {
				srv.headers = append(srv.headers, [2]string{h.Name, h.Value})
			}
			stdio = append(stdio, srv)
		}
		r := MCPReceived{Method: method, Name: s.Name, Type: s.Type, Command: s.Command, Args: s.Args, URL: s.URL}
		for _, e := range s.Env {
			if r.Env == nil {
				r.Env = map[string]string{}
			}
			r.Env[e.Name] = MCPDigest(e.Value)
		}
		for _, h := range s.Headers {
			if r.Headers == nil {
				r.Headers = map[string]string{}
			}
			r.Headers[h.Name] = MCPDigest(h.Value)
		}
		got = append(got, r)
	}
	a.mu.Lock()
	a.mcp, a.mcpStdio = got, stdio
	a.mu.Unlock()
}

// stdioServer is a stdio MCP server as received, secrets included, for
// MCPStart.
type stdioServer struct {
	name, command string
	args, env     []string
	// url and headers are an http server's (command is then "").
	url     string
	headers [][2]string
}

// MCPStartPrefix starts the chunk of each server an MCPStart step ran.
const MCPStartPrefix = "mcp started: "

// MCPStarted is what an MCPStart step reports of one stdio server it ran
// as a real agent would: its own child, in the agent's confinement.
type MCPStarted struct {
	Name string `json:"name"`
	// Error says why it could not run or how it failed; "" when it exited 0.
	Error string `json:"error,omitempty"`
	// Output is its stdout and stderr (at most 4 KiB).
	Output string `json:"output"`
}

// ParseMCPStarted reads an MCPStart chunk's text.
func ParseMCPStarted(text string) (MCPStarted, error) {
	rest, ok := strings.CutPrefix(text, MCPStartPrefix)
	if !ok {
		return MCPStarted{}, fmt.Errorf("not an MCP start: %q", text)
	}
	var out MCPStarted
	err := json.Unmarshal([]byte(rest), &out)
	return out, err
}

// mcpStart runs each stdio server of the last session/new or
// session/load in the session's directory with its arguments and
// environment, waits for it (at most 10 s) and reports it as a chunk.
func (a *agent) mcpStart() {
	a.mu.Lock()
	servers, cwd := a.mcpStdio, a.cwd
	a.mu.Unlock()
	for _, s := range servers {
		if s.command == "" {
			continue // an http server
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, s.command, s.args...)
		cmd.Dir, cmd.Env = cwd, append(os.Environ(), s.env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		r := MCPStarted{Name: s.name, Output: out.String()}
		if len(r.Output) > 4096 {
			r.Output = r.Output[:4096]
		}
		if err != nil {
			r.Error = err.Error()
		}
		raw, _ := json.Marshal(r)
		a.update(textUpdate("agent_message_chunk", MCPStartPrefix+string(raw)))
	}
}

// mcpEcho sends what the last session/new, session/load or session/resume
// carried as one agent_message_chunk (see MCPEchoPrefix, ParseMCPEcho).
func (a *agent) mcpEcho() {
	a.mu.Lock()
	got := a.mcp
	a.mu.Unlock()
	if got == nil {
		got = []MCPReceived{}
	}
	raw, _ := json.Marshal(got)
	a.update(textUpdate("agent_message_chunk", MCPEchoPrefix+string(raw)))
}
