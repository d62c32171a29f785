// Package mcpsharetest is a fake stdio MCP server for tests: the test
// binary re-executed (see Dispatch), counting its instances in a
// directory and allocating memory like a language runtime would.
package mcpsharetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentpool/agentpool/backends"
)

// Environment of the fake server.
const (
	// EnvHelper, set to "1", makes Dispatch run the fake server.
	EnvHelper = "AGENTPOOL_TEST_MCP_SERVER"
	// EnvDir is the directory where each instance writes a file named
	// after its process id when it starts.
	EnvDir = "AGENTPOOL_TEST_MCP_DIR"
	// EnvAllocMB is how many MiB it allocates and touches at start.
	EnvAllocMB = "AGENTPOOL_TEST_MCP_ALLOC_MB"
	// EnvName names the server in its answers.
	EnvName = "AGENTPOOL_TEST_MCP_NAME"
)

// Definition returns the fake server as a stdio server definition: the
// test binary, counting its instances in dir.
func Definition(dir, name string, allocMB int) backends.MCPServer {
	exe, _ := os.Executable()
	env := map[string]string{EnvHelper: "1", EnvDir: dir, EnvName: name}
	if allocMB > 0 {
		env[EnvAllocMB] = strconv.Itoa(allocMB)
	}
	return backends.MCPServer{Command: exe, Args: []string{"-test.run=^$"}, Env: env}
}

// Instances returns how many instances of the fake server started with
// dir.
func Instances(dir string) int {
	m, _ := filepath.Glob(filepath.Join(dir, "instance-*"))
	return len(m)
}

// Dispatch runs the fake server when the environment asks for it, and
// exits; it returns false otherwise. Call it first in TestMain.
func Dispatch() bool {
	if os.Getenv(EnvHelper) != "1" {
		return false
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fake mcp server:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// ballast keeps the allocated memory alive.
var ballast []byte

func run() error {
	if dir := os.Getenv(EnvDir); dir != "" {
		f := filepath.Join(dir, "instance-"+strconv.Itoa(os.Getpid()))
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			return err
		}
	}
	if mb, _ := strconv.Atoi(os.Getenv(EnvAllocMB)); mb > 0 {
		ballast = make([]byte, mb<<20)
		for i := 0; i < len(ballast); i += 4096 {
			ballast[i] = 1
		}
	}
	name := os.Getenv(EnvName)
	s := mcp.NewServer(&mcp.Implementation{Name: "fake-" + name, Version: "1"}, nil)
	addTools(s, name)
	return s.Run(context.Background(), &mcp.StdioTransport{})
}

type echoIn struct {
	Text string `json:"text"`
}

type slowIn struct {
	MS int `json:"ms"`
}

type empty struct{}

func text(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func addTools(s *mcp.Server, name string) {
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "echoes text, with the server's name and pid"},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return text("%s pid=%d: %s", name, os.Getpid(), in.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "waits ms milliseconds, sending progress every 10 ms; cancellable"},
		func(ctx context.Context, req *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
			tok := req.Params.GetProgressToken()
			end := time.After(time.Duration(in.MS) * time.Millisecond)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for n := 1; ; n++ {
				select {
				case <-ctx.Done():
					if dir := os.Getenv(EnvDir); dir != "" {
						_ = os.WriteFile(filepath.Join(dir, "cancelled-"+strconv.Itoa(os.Getpid())), nil, 0o600)
					}
					return nil, nil, ctx.Err()
				case <-end:
					return text("slept %d ms", in.MS), nil, nil
				case <-tick.C:
					if tok != nil {
						_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(n), Message: "tick"})
					}
				}
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "exits the server at once"},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			os.Exit(3)
			return nil, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "ask", Description: "asks its client for a sampling and returns the answer"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
			if err != nil {
				return text("refused: %v", err), nil, nil
			}
			t, _ := res.Content.(*mcp.TextContent)
			if t == nil {
				return text("answered: (not text)"), nil, nil
			}
			return text("answered: %s", t.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "elicit", Description: "asks its client for a value and returns it"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "name?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
			if err != nil {
				return text("refused: %v", err), nil, nil
			}
			return text("%s: %v", res.Action, res.Content["name"]), nil, nil
		})
	s.AddResource(&mcp.Resource{URI: "fake://" + name + "/about", Name: "about", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: name + " pid=" + strconv.Itoa(os.Getpid())}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who"}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello " + req.Params.Arguments["who"]}}}}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "roots", Description: "lists its client's roots"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.ListRoots(ctx, nil)
			if err != nil {
				return text("roots error: %v", err), nil, nil
			}
			return text("roots: %d", len(res.Roots)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "grow", Description: "adds a tool named extra"},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(s, &mcp.Tool{Name: "extra", Description: "added later"},
				func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
					return text("extra"), nil, nil
				})
			return text("grown"), nil, nil
		})
}
