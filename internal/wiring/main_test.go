package wiring

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/backends/agenttest"
)

func TestMain(m *testing.M) {
	agenttest.Dispatch() // the fake agents of the launcher tests
	goleak.VerifyTestMain(m)
}
