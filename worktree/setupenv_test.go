package worktree

import (
	"context"
	"strings"
	"testing"
)

// TestRunSetupEnvironment: a trusted setup keeps the daemon's environment
// (a private registry's token), less the daemon's own secrets: its
// AGENTPOOL_* variables and PostgreSQL's, which may carry its store's
// password.
func TestRunSetupEnvironment(t *testing.T) {
	t.Setenv("NPM_TOKEN", "npm-secret")
	t.Setenv("PGPASSWORD", "store-password")
	t.Setenv("PGPASSFILE", "/home/u/.pgpass")
	t.Setenv("AGENTPOOL_TOKEN", "api-token")
	m := newManager(t)
	repo := setupRepo(t, `{"setup": {"command": ["sh", "-c", "echo \"npm=[$NPM_TOKEN] pg=[$PGPASSWORD$PGPASSFILE] token=[$AGENTPOOL_TOKEN] session=[$AGENTPOOL_SESSION]\""]}}`)
	trustRepo(t, m, repo)
	wt := create(t, m, "s", repo)
	var rec setupRecorder
	end, err := m.RunSetup(context.Background(), wt, rec.report)
	if err != nil || !end.OK {
		t.Fatalf("RunSetup() = %+v, %v; want ok", end, err)
	}
	const want = "npm=[npm-secret] pg=[] token=[] session=[s]"
	if out := rec.output(); !strings.Contains(out, want) {
		t.Errorf("the setup printed %q; want %q", out, want)
	}
}
