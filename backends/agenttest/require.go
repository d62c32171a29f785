package agenttest

import (
	"os"
	"testing"
)

// RequireFeature skips the test when ok is false (the machine lacks a
// kernel feature or a program the test needs), saying which, except under
// CI=true, where the missing feature fails the test: CI machines have them
// all, and a test that silently skips there proves nothing.
func RequireFeature(t testing.TB, ok bool, feature string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("missing on this machine: %s (CI machines have it)", feature)
	}
	t.Skipf("needs %s", feature)
}
