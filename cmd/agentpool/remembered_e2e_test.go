package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/permission"
)

// TestAlwaysAllowSurvivesRestarts: "Always allow in this session" is kept
// with the session: after the daemon is stopped, and after it is killed
// with SIGKILL, the session's next turns are not asked again, and the
// audit says the remembered answer decided.
func TestAlwaysAllowSurvivesRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"asker": askingScript(3)})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# asker\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	session := d.newSessionWith(repo, "asker")
	ctx := context.Background()

	t1, err := d.client.Prompt(ctx, session, "", "build it", false)
	if err != nil {
		t.Fatalf("prompt: %v", err)
	}
	p := d.waitPending(session)
	if err := d.client.Answer(ctx, session, p.ID, permission.KindAllowAlways); err != nil {
		t.Fatalf("answer allow_always: %v", err)
	}
	d.waitTurnEnd(session, t1.ID)

	daemons := []*daemon{d}
	for _, restart := range []struct {
		name string
		stop func(*daemon)
	}{
		{"graceful", func(d *daemon) { d.stop() }},
		{"SIGKILL", func(d *daemon) { d.kill9() }},
	} {
		restart.stop(d)
		d = startDaemon(t, bin, home)
		d.stopAtCleanup()
		daemons = append(daemons, d)
		turn, err := d.client.Prompt(ctx, session, "", "build it again", false)
		if err != nil {
			t.Fatalf("prompt after a %s restart: %v\n%s", restart.name, err, d.out)
		}
		ended := d.waitTurnEnd(session, turn.ID)
		if ended.StopReason != "end_turn" {
			t.Errorf("turn %d after a %s restart ended %q; want end_turn", turn.ID, restart.name, ended.StopReason)
		}
		var resolved []eventData
		for _, ev := range eventsOf(t, d.client, session) {
			if ev.Turn == turn.ID && ev.Type == backends.EventPermissionResolved {
				resolved = append(resolved, decodeData(ev))
			}
		}
		if len(resolved) != 1 || resolved[0].DecidedBy != permission.DecidedByRemembered || resolved[0].Decision != string(permission.DecisionAllow) {
			t.Errorf("permission decisions of turn %d after a %s restart = %+v; want one allow decided by remembered", turn.ID, restart.name, resolved)
		}
	}

	// The banner of each restart names the session it brought back.
	d.stop()
	for i, d := range daemons {
		said := strings.Contains(d.out.String(), "sessions:  1 session brought back (list it: ")
		if said != (i > 0) {
			t.Errorf("daemon %d (restarted: %v) banner:\n%s\nsays it brought a session back: %v", i, i > 0, d.out, said)
		}
	}
}

// waitPending waits for a pending permission request of session. A
// request that never comes fails the test.
func (d *daemon) waitPending(session string) permission.Pending {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ps, err := d.client.Permissions(context.Background(), session)
		if err == nil && len(ps) > 0 {
			return ps[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.t.Fatalf("no permission request in session %s; daemon log:\n%s", session, d.out)
	return permission.Pending{}
}

// waitTurnEnd waits for turn n of session to end and returns its
// turn.ended; a permission question meanwhile fails the test (it would
// wait for minutes).
func (d *daemon) waitTurnEnd(session string, n int64) eventData {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, ev := range eventsOf(d.t, d.client, session) {
			if ev.Turn == n && ev.Type == backends.EventTurnEnded {
				return decodeData(ev)
			}
		}
		if ps, err := d.client.Permissions(context.Background(), session); err == nil && len(ps) > 0 {
			d.t.Fatalf("turn %d of session %s asks permission again: %+v", n, session, ps[0].Request)
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("turn %d of session %s did not end; daemon log:\n%s", n, session, d.out)
	return eventData{}
}

// stop stops the daemon with SIGTERM and waits for it.
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
}

// TestRememberedAnswersListedAndForgotten: `permissions remembered` lists
// the "always" answers a session keeps (after a restart too), `permissions
// forget` takes them back, and the next turns are asked again, after a
// restart too: the forgetting is stored as the answer was.
func TestRememberedAnswersListedAndForgotten(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"asker": askingScript(4)})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# asker\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	session := d.newSessionWith(repo, "asker")
	ctx := context.Background()

	if out, err := d.cli("permissions", "remembered", session); err != nil || !strings.Contains(out, "remembers no answer") {
		t.Errorf("permissions remembered before any answer = %v\n%s", err, out)
	}
	t1, err := d.client.Prompt(ctx, session, "", "build it", false)
	if err != nil {
		t.Fatal(err)
	}
	p := d.waitPending(session)
	if err := d.client.Answer(ctx, session, p.ID, permission.KindAllowAlways); err != nil {
		t.Fatal(err)
	}
	d.waitTurnEnd(session, t1.ID)

	d.stop()
	d = startDaemon(t, bin, home)
	d.stopAtCleanup()
	out, err := d.cli("permissions", "remembered", session)
	if err != nil || !regexp.MustCompile(`(?m)^asker\s+execute\s+Always allow in this session$`).MatchString(out) ||
		!strings.Contains(out, "permissions forget "+session) {
		t.Fatalf("permissions remembered after a restart = %v\n%s\nwant asker's Always allow of execute, and how to take it back", err, out)
	}
	if list, err := d.client.Remembered(ctx, session); err != nil || len(list) != 1 || list[0].Agent != "asker" || list[0].Action != "execute" || list[0].Kind != permission.KindAllowAlways {
		t.Errorf("GET remembered = %+v, %v", list, err)
	}
	if out, err := d.cli("permissions", "forget", session); err != nil || !strings.Contains(out, "forgot 1 remembered answer") {
		t.Fatalf("permissions forget = %v\n%s", err, out)
	}
	if out, err := d.cli("permissions", "remembered", session); err != nil || !strings.Contains(out, "remembers no answer") {
		t.Errorf("permissions remembered after forget = %v\n%s", err, out)
	}
	// Asked again, in this run and after a restart.
	for i := range 2 {
		turn, err := d.client.Prompt(ctx, session, "", "build it again", false)
		if err != nil {
			t.Fatal(err)
		}
		p := d.waitPending(session)
		if p.Request.Turn != turn.ID {
			t.Errorf("request %s is of turn %d; want %d", p.ID, p.Request.Turn, turn.ID)
		}
		if err := d.client.Answer(ctx, session, p.ID, permission.KindAllowOnce); err != nil {
			t.Fatal(err)
		}
		d.waitTurnEnd(session, turn.ID)
		if i == 0 {
			d.stop()
			d = startDaemon(t, bin, home)
			d.stopAtCleanup()
		}
	}
	if out, err := d.cli("permissions", "forget", "s-NOSUCHSESSION"); err == nil || !strings.Contains(out, "s-NOSUCHSESSION") {
		t.Errorf("permissions forget of an unknown session = %v\n%s; want an error naming it", err, out)
	}
}
