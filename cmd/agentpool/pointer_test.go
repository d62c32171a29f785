package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestProtectedHomes: besides its own data directory, the daemon keeps
// agents and setups out of the per-user one, whose pointer file chooses
// the daemon the CLI talks to.
func TestProtectedHomes(t *testing.T) {
	env := map[string]string{"HOME": "/home/u"}
	getenv := func(k string) string { return env[k] }
	if got, want := protectedHomes("/src/app/.agentpool", getenv), []string{"/src/app/.agentpool", "/home/u/.local/state/agentpool"}; !cmp.Equal(got, want) {
		t.Errorf("protectedHomes(checkout home) = %q; want %q", got, want)
	}
	if got, want := protectedHomes("/home/u/.local/state/agentpool", getenv), []string{"/home/u/.local/state/agentpool"}; !cmp.Equal(got, want) {
		t.Errorf("protectedHomes(per-user home) = %q; want %q", got, want)
	}
}
