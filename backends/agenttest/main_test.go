package agenttest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/backends/agenttest"
)

func TestMain(m *testing.M) {
	agenttest.Dispatch()
	goleak.VerifyTestMain(m)
}
