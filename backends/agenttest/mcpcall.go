package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPCall is a step that calls Tool with Args on each MCP server the last
// session/new or session/load carried (stdio: the agent starts it in the
// session's directory; http: it connects with the headers given, through
// the proxy its environment names, as real agents do) and reports each
// call as a chunk (see ParseMCPCalled).
type MCPCall struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args,omitempty"`
}

// MCPCalledPrefix starts the chunk of each call an MCPCall step made.
const MCPCalledPrefix = "mcp called: "

// MCPCalled is what an MCPCall step reports of one server.
type MCPCalled struct {
	Name string `json:"name"`
	// Transport is "stdio" or "http".
	Transport string `json:"transport"`
	// Text is the text of the tool's answer; Error why there is none.
	Text  string `json:"text,omitempty"`
	Error string `json:"error,omitempty"`
}

// ParseMCPCalled reads an MCPCall chunk's text.
func ParseMCPCalled(text string) (MCPCalled, bool) {
	rest, ok := strings.CutPrefix(text, MCPCalledPrefix)
	if !ok {
		return MCPCalled{}, false
	}
	var out MCPCalled
	return out, json.Unmarshal([]byte(rest), &out) == nil
}

func (a *agent) mcpCall(c MCPCall) {
	a.mu.Lock()
	servers, cwd := a.mcpStdio, a.cwd
	a.mu.Unlock()
	for _, s := range servers {
		r := MCPCalled{Name: s.name, Transport: "stdio"}
		if s.command == "" {
			r.Transport = "http"
		}
		text, err := callOne(s, cwd, c)
		r.Text = text
		if err != nil {
			r.Error = err.Error()
		}
		raw, _ := json.Marshal(r)
		a.update(textUpdate("agent_message_chunk", MCPCalledPrefix+string(raw)))
	}
}

// headerRT adds the server's headers to every request.
type headerRT struct {
	headers [][2]string
	base    http.RoundTripper
}

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for _, kv := range h.headers {
		r.Header.Set(kv[0], kv[1])
	}
	return h.base.RoundTrip(r)
}

func callOne(s stdioServer, cwd string, c MCPCall) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var t mcp.Transport
	if s.command == "" {
		t = &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: &http.Client{
			Transport: headerRT{headers: s.headers, base: &http.Transport{Proxy: http.ProxyFromEnvironment}}}}
	} else {
		cmd := exec.Command(s.command, s.args...)
		cmd.Dir, cmd.Env = cwd, append(os.Environ(), s.env...)
		t = &mcp.CommandTransport{Command: cmd}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fake-agent", Version: "1"}, nil).Connect(ctx, t, nil)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.Tool, Arguments: c.Args})
	if err != nil {
		return "", fmt.Errorf("call %s: %w", c.Tool, err)
	}
	var b strings.Builder
	for _, content := range res.Content {
		if tc, ok := content.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), nil
}
