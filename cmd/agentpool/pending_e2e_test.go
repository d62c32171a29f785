package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// TestEventsSaysHowToAnswer: `agentpool events --follow`, watching a turn
// another client started, says under a permission request that waits how
// to answer it, as prompt does; that command answers it; and a request
// already answered, read back from the log, says nothing more.
func TestEventsSaysHowToAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"asker": askingScript(2)})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# asker\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()
	s := d.newSessionWith(repo, "asker")

	follow := exec.Command(bin, "events", s, "--follow")
	follow.Env = append(os.Environ(), "AGENTPOOL_HOME="+home)
	out := &ptyOutput{}
	follow.Stdout, follow.Stderr = out, out
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = follow.Process.Kill(); _ = follow.Wait() }()
	out.waitFor(t, "session.created", 30*time.Second)

	// The turn is started elsewhere (the page, MCP, the API).
	if _, err := d.client.Prompt(ctx, s, "", "build it", false); err != nil {
		t.Fatal(err)
	}
	hint := "waiting for an answer: " + bin + " permissions answer " + s + " "
	out.waitFor(t, hint, 30*time.Second)
	line := out.String()[strings.Index(out.String(), hint):]
	line, _, _ = strings.Cut(line, "\n")
	f := strings.Fields(line[strings.Index(line, "permissions answer"):])
	if len(f) != 5 || f[4] != "allow_once|allow_always|reject_once" {
		t.Fatalf("events --follow says %q; want the answer command with the choices", line)
	}
	if p := d.waitPending(s); p.ID != f[3] {
		t.Fatalf("events --follow names request %s; the session waits for %s", f[3], p.ID)
	}
	if o, err := d.cli("permissions", "answer", s, f[3], "allow_once"); err != nil {
		t.Fatalf("permissions answer %s %s: %v\n%s", s, f[3], err, o)
	}
	d.waitTurnEnd(s, 1)
	out.waitFor(t, "turn.ended", 30*time.Second)

	// Read back later, the answered request says only that it was asked.
	o, err := d.cli("events", s)
	if err != nil || !strings.Contains(o, "permission.requested") || strings.Contains(o, "waiting for an answer") {
		t.Errorf("events %s after the answer = %v\n%s\nwant the request, and no answer command", s, err, o)
	}
	// A request that waits when events starts is named too.
	if _, err := d.client.Prompt(ctx, s, "", "build it again", false); err != nil {
		t.Fatal(err)
	}
	p := d.waitPending(s)
	if o, err := d.cli("events", s); err != nil || strings.Count(o, "waiting for an answer") != 1 || !strings.Contains(o, "permissions answer "+s+" "+p.ID+" ") {
		t.Errorf("events %s with request %s waiting = %v\n%s\nwant its answer command once", s, p.ID, err, o)
	}
	if err := d.client.Answer(ctx, s, p.ID, "reject_once"); err != nil {
		t.Fatal(err)
	}
	d.waitTurnEnd(s, 2)
}
