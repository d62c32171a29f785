package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestTrustWithoutSetupFile: `trust` in a repository without
// .agentpool.json says so plainly, and what trust is for, instead of an
// HTTP status.
func TestTrustWithoutSetupFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	d := startDaemon(t, bin, t.TempDir())
	d.stopAtCleanup()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# plain\n"})
	out, err := d.cli("trust", repo)
	if err == nil {
		t.Fatalf("trust without a setup file succeeded:\n%s", out)
	}
	top, _ := filepath.EvalSymlinks(repo)
	for _, want := range []string{top + " has no .agentpool.json, so there is nothing to trust.", "copy untracked files", "setup command"} {
		if !strings.Contains(out, want) {
			t.Errorf("trust without a setup file said:\n%s\nwant it to say %q", out, want)
		}
	}
	for _, bad := range []string{"404", "not_found", "not found:"} {
		if strings.Contains(out, bad) {
			t.Errorf("trust without a setup file said:\n%s\nwant no %q", out, bad)
		}
	}
}
