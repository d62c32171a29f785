package main

import (
	"context"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// TestDefaultAgentFromProvidersFile: a session created without an agent
// (the CLI's session new without --agent) gets the providers file's
// "default_agent"; a file naming no provider there is refused with a
// diagnostic naming the field, and the last good default stays.
func TestDefaultAgentFromProvidersFile(t *testing.T) {
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"alpha": agenttest.Script{}})
	set := func(agent string) { t.Helper(); setDefaultAgent(t, home, agent) } // acp_updates_e2e_test.go
	set("alpha")
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	repo := e2eRepoAt(t, t.TempDir(), map[string]string{"README.md": "# r\n"})
	out, err := d.cli("session", "new", "--repo", repo, "--no-warm")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	ctx := context.Background()
	list, err := d.client.Sessions(ctx)
	if err != nil || len(list) != 1 || list[0].ActiveAgent != "alpha" {
		t.Fatalf("sessions = %+v, %v; want one session of alpha, the default_agent", list, err)
	}
	set("nosuch")
	out, err = d.cli("providers", "refresh")
	if err == nil || !strings.Contains(out, "default_agent") {
		t.Errorf("providers refresh with default_agent naming no provider: %v\n%s\nwant a refusal naming default_agent", err, out)
	}
	out, err = d.cli("session", "new", "--repo", repo, "--no-warm")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	list, _ = d.client.Sessions(ctx)
	for _, s := range list {
		if s.ActiveAgent != "alpha" {
			t.Errorf("session %s of %q after a bad file; want the last good default, alpha", s.ID, s.ActiveAgent)
		}
	}
}
