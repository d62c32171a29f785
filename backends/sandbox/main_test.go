package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/backends/sandbox"
)

func TestMain(m *testing.M) {
	// The test binary copied as the launcher binary answers its identity
	// (see TestLauncherNextTo).
	if len(os.Args) == 2 && os.Args[1] == sandbox.IdentityFlag && filepath.Base(os.Args[0]) == sandbox.LauncherBinary {
		fmt.Println(sandbox.LauncherIdentity())
		os.Exit(0)
	}
	sandbox.MaybeLaunch()
	goleak.VerifyTestMain(m)
}
