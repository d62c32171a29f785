package httpapi

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/backends/agenttest"
)

func TestMain(m *testing.M) {
	agenttest.Dispatch() // the fake agents of the tests with real pools
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("os/signal.loop"))
}
