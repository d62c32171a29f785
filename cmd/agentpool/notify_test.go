package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// testFeed is a feed that, like the pool's daemon-wide one, subscribes
// from now.
type testFeed struct {
	*pool.Feed
	mu   sync.Mutex
	last int64
}

func (f *testFeed) Publish(ev backends.Event) {
	f.mu.Lock()
	f.last = ev.Seq
	f.mu.Unlock()
	f.Feed.Publish(ev)
}

// feedOf returns a feed and a subscribe function over it.
func feedOf() (*testFeed, func() *pool.Subscription) {
	f := &testFeed{Feed: pool.NewFeed(1024, nil)}
	return f, func() *pool.Subscription {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.Feed.Subscribe(f.last)
	}
}

func TestNotifierRunsTheCommandForNotableEvents(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "notified")
	n := &Notifier{Command: []string{`cat >> ` + out + `; echo "$AGENTPOOL_EVENT $AGENTPOOL_SESSION" >> ` + out + `.env`}}
	f, sub := feedOf()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); n.Run(ctx, sub) }()
	seq := int64(0)
	pub := func(typ backends.EventType, data any) {
		seq++
		f.Publish(backends.Event{Seq: seq, Session: "s1", Agent: "demo", Type: typ, Data: backends.MustJSON(data)})
	}
	time.Sleep(20 * time.Millisecond) // let Run subscribe
	pub(backends.EventMessageChunk, map[string]string{"text": "<not notable>"})
	pub(backends.EventPermissionRequest, map[string]string{"title": "Write x; rm -rf / $(reboot)"})
	pub(backends.EventAgentExited, backends.ExitData{PID: 1, Expected: true})
	pub(backends.EventAgentExited, backends.ExitData{PID: 2, Expected: false})
	pub(backends.EventTurnEnded, map[string]string{"stop_reason": "end_turn"})
	deadline := time.Now().Add(10 * time.Second)
	var lines []string
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(out + ".env")
		if lines = strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) >= 3 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if len(lines) != 3 {
		t.Fatalf("notified %d times (%q); want 3: the permission request, the failed agent, the turn's end", len(lines), lines)
	}
	b, _ := os.ReadFile(out)
	var kinds []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev backends.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("stdin line %q is not an event: %v", l, err)
		}
		kinds = append(kinds, string(ev.Type))
		if ev.Type == backends.EventPermissionRequest && !strings.Contains(string(ev.Data), "$(reboot)") {
			t.Errorf("the agent's text did not reach the command verbatim: %s", ev.Data)
		}
	}
	if len(kinds) != 3 || !strings.Contains(strings.Join(lines, ","), "s1") {
		t.Errorf("events %q, env lines %q", kinds, lines)
	}
}

// TestNotifierNeverSlowsThePool gives it a command that hangs: the
// publisher never waits, runs are killed at the timeout, the backlog past
// its bound is dropped and counted, and Run ends promptly.
func TestNotifierNeverSlowsThePool(t *testing.T) {
	n := &Notifier{Command: []string{"sleep 30"}, Timeout: 200 * time.Millisecond}
	f, sub := feedOf()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx, sub) }()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	for i := 1; i <= 200; i++ {
		f.Publish(backends.Event{Seq: int64(i), Session: "s", Type: backends.EventTurnEnded, Data: backends.MustJSON(map[string]int{"i": i})})
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("publishing 200 events took %v with a hung notify command", d)
	}
	waitFor := time.Now().Add(5 * time.Second)
	for n.Dropped.Load() == 0 && time.Now().Before(waitFor) {
		time.Sleep(10 * time.Millisecond)
	}
	if n.Dropped.Load() == 0 {
		t.Error("no notification dropped with a hung command and 200 events")
	}
	time.Sleep(500 * time.Millisecond) // past the timeout: the first runs were killed
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end after its context")
	}
	if r := n.Runs.Load(); r < 2 || r > notifyBacklog+notifyRunning+2 {
		t.Errorf("%d runs; want the first ones killed at the timeout and no more than the backlog allows", r)
	}
}

// TestNotifyEndToEnd runs the built daemon with a notify command and a demo
// turn that asks permission: the command hears of the request and of the
// turn's end.
func TestNotifyEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := newE2ERepo(t)
	heard := filepath.Join(t.TempDir(), "heard")
	d := startDaemon(t, bin, home, "AGENTPOOL_NOTIFY=echo \"$AGENTPOOL_EVENT\" >> "+heard)
	defer func() { _ = d.cmd.Process.Kill(); _ = d.cmd.Wait() }()
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "demo")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	ss, err := d.client.Sessions(context.Background())
	if err != nil || len(ss) != 1 {
		t.Fatalf("sessions = %v, %v", ss, err)
	}
	d.promptApproved(ss[0].ID, "hello")
	deadline := time.Now().Add(10 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(heard)
		if got = string(b); strings.Contains(got, "turn.ended") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(got, "permission.requested") || !strings.Contains(got, "turn.ended") {
		t.Fatalf("the notify command heard %q; want permission.requested and turn.ended", got)
	}
}
