package registry

import (
	"strings"
	"testing"
)

// TestDefaultAgent: "default_agent" names the agent of a session created
// without one; a name that is no provider rejects the file with a
// diagnostic naming the field, and the last good value stays in force.
func TestDefaultAgent(t *testing.T) {
	f := newFixture(t)
	f.write(t, `{"version": 1, "default_agent": "codex"}`)
	r := open(t, f.config())
	if got := r.Snapshot().DefaultAgent; got != "codex" {
		t.Fatalf("DefaultAgent = %q; want codex", got)
	}
	f.write(t, `{"version": 1, "default_agent": "nosuch"}`)
	err := r.Reload()
	if err == nil || !strings.Contains(err.Error(), "default_agent") || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("Reload() with an unknown default_agent = %v; want a diagnostic naming default_agent and the name", err)
	}
	if got := r.Snapshot().DefaultAgent; got != "codex" {
		t.Errorf("DefaultAgent after a bad file = %q; want the last good codex", got)
	}
	f.write(t, `{"version": 1, "default_agent": "mine", "providers": {"mine": {"extends": "acp", "command": ["mine-acp"]}}}`)
	v := r.Snapshot().Version
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if s := r.Snapshot(); s.DefaultAgent != "mine" || s.Version == v {
		t.Errorf("DefaultAgent = %q (version %d, was %d); want mine, as a new version", s.DefaultAgent, s.Version, v)
	}
	f.write(t, `{"version": 1, "providers": {}}`)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := r.Snapshot().DefaultAgent; got != "" {
		t.Errorf("DefaultAgent after the field went = %q; want none", got)
	}
}
