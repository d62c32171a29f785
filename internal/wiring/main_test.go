package wiring

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/mcpshare"
	"github.com/agentpool/agentpool/mcpshare/mcpsharetest"
)

func TestMain(m *testing.M) {
	sandbox.MaybeLaunch() // the test binary as the launcher (early_test.go)
	if len(os.Args) == 3 && os.Args[1] == RelaySubcommand {
		// The test binary as agentpool mcp-relay (Launcher.RelayCommand),
		// started by a fake agent whose environment would make it one.
		if err := mcpshare.Relay(context.Background(), os.Args[2], os.Getenv(EnvMCPToken), os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	mcpsharetest.Dispatch() // the fake MCP servers, before the agents whose environment they inherit
	agenttest.Dispatch()    // the fake agents of the launcher tests
	goleak.VerifyTestMain(m)
}
