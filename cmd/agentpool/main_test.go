package main

import (
	"os"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/mcpshare/mcpsharetest"
)

// TestMain lets the test binary stand in for an agent (the scripted fake
// and its helpers) when a test's daemon launches it.
func TestMain(m *testing.M) {
	floodMain()
	mcpsharetest.Dispatch() // the fake MCP servers, before the agents whose environment they inherit
	agenttest.Dispatch()
	os.Exit(m.Run())
}
