package mcpshare_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/mcpshare"
	"github.com/agentpool/agentpool/mcpshare/mcpsharetest"
)

func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "mcp-relay" {
		// The test binary as agentpool mcp-relay, for the benchmark.
		if err := mcpshare.Relay(context.Background(), os.Args[2], os.Getenv("AGENTPOOL_MCP_TOKEN"), os.Stdin, os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	mcpsharetest.Dispatch()
	goleak.VerifyTestMain(m)
}

// newManager returns a Manager with its state in a temporary directory,
// closed when the test ends.
func newManager(t *testing.T, idle time.Duration) *mcpshare.Manager {
	t.Helper()
	m, err := mcpshare.New(mcpshare.Config{Dir: t.TempDir(), IdleTimeout: idle})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// attach gives session the fake server def under the name "fake".
func attach(t *testing.T, m *mcpshare.Manager, session string, def backends.MCPServer) *mcpshare.Lease {
	t.Helper()
	l, err := m.Attach(session, "agent", backends.MCPServers{"fake": def})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(l.Release)
	return l
}

// bearerRT adds a fixed Authorization header.
type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens an MCP session to url with token, as an http agent would.
func connect(t *testing.T, url, token string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, opts)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerRT{token}}}, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func mustConnect(t *testing.T, l *mcpshare.Lease, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := connect(t, l.URL("fake"), l.Token(), opts)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return cs
}

// call calls tool with args and returns its text.
func call(ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) (string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), nil
}

func stat(t *testing.T, m *mcpshare.Manager) mcpshare.Stat {
	t.Helper()
	st := m.Stats()
	if len(st) != 1 {
		t.Fatalf("Stats() = %d servers; want 1", len(st))
	}
	return st[0]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func httpClient(token string) *http.Client { return &http.Client{Transport: bearerRT{token}} }
