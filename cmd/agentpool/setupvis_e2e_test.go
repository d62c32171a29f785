package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// slowFailingSetup is a setup file whose command prints, takes ~2 s and
// fails with exit code 3.
const slowFailingSetup = `{"setup": {"command": ["sh", "-c", "echo installing deps; sleep 2; echo deps.lock is missing >&2; exit 3"]}}`

// setupRepo makes a repository committing setup as its .agentpool.json,
// trusted through the API of d.
func setupRepo(t *testing.T, d *daemon, setup string) string {
	t.Helper()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# setup\n"})
	if err := os.WriteFile(filepath.Join(repo, ".agentpool.json"), []byte(setup), 0o644); err != nil {
		t.Fatal(err)
	}
	e2eGit(t, repo, "add", ".agentpool.json")
	e2eGit(t, repo, "commit", "-q", "-m", "setup")
	ctx := context.Background()
	sf, err := d.client.SetupFile(ctx, repo)
	if err != nil {
		t.Fatalf("GET /v1/trust: %v", err)
	}
	if _, err := d.client.Trust(ctx, repo, sf.SHA256); err != nil {
		t.Fatalf("POST /v1/trust: %v", err)
	}
	return repo
}

// TestEndToEndSetupShownByCLI: `session new` says the trusted setup runs
// and how to follow it; `prompt`, whose turn waits for it, shows the wait,
// its output and its failure with the exit code and last lines, then the
// turn.
func TestEndToEndSetupShownByCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	script := map[string]any{"agent_name": "quick", "turns": []any{map[string]any{"steps": []any{map[string]any{"chunk": "Done.\n"}}}}}
	writeScripted(t, home, bin, map[string]any{"quick": script})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	repo := setupRepo(t, d, slowFailingSetup)

	out, err := d.cli("session", "new", "--repo", repo, "--agent", "quick", "--id", "s-setup")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	want := "setup running: sh -c 'echo installing deps; sleep 2; echo deps.lock is missing >&2; exit 3' (follow: " + bin + " events s-setup)"
	if !strings.Contains(out, want) {
		t.Errorf("session new output:\n%s\nwant it to contain %q", out, want)
	}
	out, err = d.cli("prompt", "s-setup", "go")
	if err != nil {
		t.Fatalf("prompt: %v\n%s", err, out)
	}
	for _, w := range []string{
		"waiting for the worktree's setup: sh -c 'echo installing deps;",
		"setup failed in 2",
		"with exit code 3",
		"  │ deps.lock is missing\n",
		"Done.\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("prompt output:\n%s\nwant it to contain %q", out, w)
		}
	}
	if i, j := strings.Index(out, "with exit code 3"), strings.Index(out, "Done."); i < 0 || j < i {
		t.Errorf("prompt output:\n%s\nwant the setup's end before the turn", out)
	}
}
