package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/permission"
)

// TestEndToEndClusterRememberedAnswers: "Always allow in this session" is
// kept with the session in the shared store, so that a session moved to
// another host, and then taken over by the first host when the second is
// killed with SIGKILL, is not asked again: each later turn's permission
// is decided by the remembered answer, on whichever host runs it.
func TestEndToEndClusterRememberedAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs two daemons on PostgreSQL")
	}
	url := startPostgres(t)
	bin := agentpoolBinary(t)
	key := clusterKeyFile(t)
	remote := sharedRemote(t)
	start := func(id string) *clusterHost {
		home := t.TempDir()
		writeScripted(t, home, bin, map[string]any{"asker": askingScript(4)})
		d := startDaemonArgs(t, bin, home, []string{"--lease-ttl", clusterTTL.String()},
			"AGENTPOOL_STORE="+url, "AGENTPOOL_HOST_ID="+id, clusterKeyEnv+"="+key)
		return &clusterHost{daemon: d, id: id}
	}
	a, b := start("host-a"), start("host-b")
	for _, h := range []*clusterHost{a, b} {
		h.waitHosts(2)
	}
	waitAgents(t, []*clusterHost{a, b}, "asker")
	ctx := context.Background()

	var created httpapi.CreatedSession
	if err := a.client.Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": remote, "agent": "asker", "host": "host-a"}, &created); err != nil {
		t.Fatal(err)
	}
	id := created.ID
	t1, err := a.client.Prompt(ctx, id, "", "build it", false)
	if err != nil {
		t.Fatal(err)
	}
	p := a.waitPending(id)
	if err := a.client.Answer(ctx, id, p.ID, permission.KindAllowAlways); err != nil {
		t.Fatalf("answer allow_always: %v", err)
	}
	a.waitTurnEnd(id, t1.ID)

	// remembered prompts through h (retrying while the session is on its
	// way between hosts) and checks that the turn was not asked: its one
	// permission decision was the remembered answer.
	remembered := func(h *clusterHost, want string, what string) {
		t.Helper()
		deadline := time.Now().Add(clusterTTL + 30*time.Second)
		var turn int64
		for {
			tr, err := h.client.Prompt(ctx, id, "", "build it "+what, false)
			if err == nil {
				turn = tr.ID
				break
			}
			var ae *httpapi.Error
			if !errors.As(err, &ae) || time.Now().After(deadline) || (ae.Status != 503 && ae.Status != 409) {
				t.Fatalf("prompt %s %s: %v", id, what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if ended := h.waitTurnEnd(id, turn); ended.StopReason != "end_turn" {
			t.Errorf("turn %d %s ended %q; want end_turn", turn, what, ended.StopReason)
		}
		var resolved []eventData
		for _, ev := range eventsOf(t, h.client, id) {
			if ev.Turn == turn && ev.Type == backends.EventPermissionResolved {
				resolved = append(resolved, decodeData(ev))
			}
		}
		if len(resolved) != 1 || resolved[0].DecidedBy != permission.DecidedByRemembered || resolved[0].Decision != string(permission.DecisionAllow) {
			t.Errorf("permission decisions of turn %d %s = %+v; want one allow decided by remembered", turn, what, resolved)
		}
		if s, err := h.client.Session(ctx, id); err != nil || s.Host != want {
			t.Errorf("session %s %s is on %q (%v); want %s", id, what, s.Host, err, want)
		}
	}

	if res, err := a.client.MoveSession(ctx, id, "host-b"); err != nil || res.To != "host-b" {
		t.Fatalf("move %s to host-b = %+v, %v", id, res, err)
	}
	remembered(a, "host-b", "after the move to host-b")

	b.kill9()
	remembered(a, "host-a", "after host-b died")
	if ms := movedEvents(t, a.client, id); len(ms) != 2 || ms[0]["reason"] != "move" || ms[1]["reason"] != "failover" {
		t.Errorf("session %s: session.moved %v; want the move, then the failover", id, ms)
	}
}
