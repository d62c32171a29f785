package sandbox_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/backends/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.MaybeLaunch()
	goleak.VerifyTestMain(m)
}
