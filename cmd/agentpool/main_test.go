package main

import (
	"os"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// TestMain lets the test binary stand in for an agent (the scripted fake
// and its helpers) when a test's daemon launches it.
func TestMain(m *testing.M) {
	floodMain()
	agenttest.Dispatch()
	os.Exit(m.Run())
}
