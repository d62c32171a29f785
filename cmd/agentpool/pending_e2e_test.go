package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestPermissionsListAcrossSessions: `permissions list` without a session
// lists every request that waits for the user, in every session, with its
// agent, what it asks, its age and the command that answers it; that
// command works.
func TestPermissionsListAcrossSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"asker": askingScript(1)})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# asker\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()

	if out, err := d.cli("permissions", "list"); err != nil || !strings.Contains(out, "nothing waits for an answer") {
		t.Errorf("permissions list with nothing pending = %q, %v; want it to say so", out, err)
	}
	var sessions []string
	for range 2 {
		s := d.newSessionWith(repo, "asker")
		if _, err := d.client.Prompt(ctx, s, "", "build it", false); err != nil {
			t.Fatal(err)
		}
		d.waitPending(s)
		sessions = append(sessions, s)
	}
	out, err := d.cli("permissions", "list")
	if err != nil {
		t.Fatalf("permissions list: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "SESSION") {
		t.Fatalf("permissions list =\n%s\nwant a header and one line per session", out)
	}
	for i, s := range sessions {
		l := lines[i+1]
		for _, want := range []string{s, "asker", "execute: Run make", "permissions answer " + s + " ", "allow_once|allow_always|reject_once"} {
			if !strings.Contains(l, want) {
				t.Errorf("line of session %s = %q; want it to contain %q", s, l, want)
			}
		}
	}
	// The command it prints answers the request.
	f := strings.Fields(lines[1][strings.Index(lines[1], "permissions answer"):])
	if out, err := d.cli("permissions", "answer", f[2], f[3], "allow_once"); err != nil {
		t.Fatalf("permissions answer %s %s: %v\n%s", f[2], f[3], err, out)
	}
	d.waitTurnEnd(sessions[0], 1)
	if out, _ := d.cli("permissions", "list"); strings.Contains(out, sessions[0]) || !strings.Contains(out, sessions[1]) {
		t.Errorf("permissions list after answering %s =\n%s\nwant only %s", sessions[0], out, sessions[1])
	}
}
