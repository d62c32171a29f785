package registry

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestResolveConfigDefaults: a provider's "config" defaults reach its
// launch spec, and one extending it merges its own key by key.
func TestResolveConfigDefaults(t *testing.T) {
	f := newFixture(t)
	f.install(t, "claude-agent-acp")
	f.write(t, `{
  "version": 1,
  "providers": {
    "claude": {"config": {"model": "opus", "mode": "plan"}},
    "claude-fast": {"extends": "claude", "config": {"model": "sonnet"}}
  }
}`)
	r := open(t, f.config())
	for id, want := range map[string]map[string]string{
		"claude":      {"model": "opus", "mode": "plan"},
		"claude-fast": {"model": "sonnet", "mode": "plan"},
	} {
		spec, err := r.Resolve(id)
		if err != nil {
			t.Fatalf("Resolve(%q) error = %v", id, err)
		}
		if diff := cmp.Diff(want, spec.Config); diff != "" {
			t.Errorf("Resolve(%q).Config (-want +got):\n%s", id, diff)
		}
	}
}
