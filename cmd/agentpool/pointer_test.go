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

// TestAtOrAbove: a quick start's .agentpool counts for its whole checkout,
// another data directory for what is inside it, and the nearest ranks
// highest.
func TestAtOrAbove(t *testing.T) {
	for _, tt := range []struct {
		home, dir string
		ok        bool
	}{
		{"/src/app/.agentpool", "/src/app", true},
		{"/src/app/.agentpool", "/src/app/cmd/x", true},
		{"/src/app/.agentpool", "/src/application", false},
		{"/src/app/.agentpool", "/src", false},
		{"/srv/data", "/srv/data/sub", true},
		{"/srv/data", "/srv", false},
		{"/srv/data", "/srv/database", false},
	} {
		if _, ok := atOrAbove(tt.home, tt.dir); ok != tt.ok {
			t.Errorf("atOrAbove(%q, %q) = %v; want %v", tt.home, tt.dir, ok, tt.ok)
		}
	}
	near, _ := atOrAbove("/src/app/sub/.agentpool", "/src/app/sub/x")
	far, _ := atOrAbove("/src/app/.agentpool", "/src/app/sub/x")
	if near <= far {
		t.Errorf("atOrAbove ranks /src/app/sub/.agentpool %d, /src/app/.agentpool %d; want the nearer higher", near, far)
	}
}
