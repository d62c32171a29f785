package hosts_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentpool/agentpool/hosts"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "agentpool.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Two daemons on one store: each heartbeats its load and providers, each
// lists both with their heartbeats' ages, one that stops beating is gone
// after a few intervals, and one that stops cleanly leaves the list.
func TestHeartbeatsAndList(t *testing.T) {
	ctx := context.Background()
	st := wiring.Hosts{S: openStore(t)}
	clk := &clock{now: time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)}
	warm := 3
	a, err := hosts.New(hosts.Config{Store: st, ID: "host-a", Advertise: "http://127.0.0.1:7001", Capacity: 16, Version: "v1",
		Providers: func() []string { return []string{"claude", "codex"} }, Load: func() (int, int) { return warm, 5 },
		Interval: time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	b, err := hosts.New(hosts.Config{Store: st, ID: "host-b", Advertise: "http://127.0.0.1:7002", Capacity: 8, Interval: time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*hosts.Heartbeat{a, b} {
		if err := h.Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	clk.add(1500 * time.Millisecond)
	warm = 4
	if err := a.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := a.List(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %+v, %v; want both hosts", list, err)
	}
	ha, hb := list[0], list[1]
	if ha.ID != "host-a" || !ha.Self || !ha.Alive || ha.HeartbeatAgeMS != 0 || ha.Warm != 4 || ha.Sessions != 5 || ha.Capacity != 16 ||
		!slices.Equal(ha.Providers, []string{"claude", "codex"}) || ha.Advertise != "http://127.0.0.1:7001" || ha.Version != "v1" {
		t.Errorf("host a = %+v; want itself, alive, its latest load", ha)
	}
	if hb.ID != "host-b" || hb.Self || !hb.Alive || hb.HeartbeatAgeMS != 1500 || hb.Providers == nil || len(hb.Providers) != 0 {
		t.Errorf("host b = %+v; want another host, alive, 1.5 s since its heartbeat, no providers", hb)
	}
	if !ha.StartedAt.Equal(time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)) {
		t.Errorf("host a started at %v; want when it was made", ha.StartedAt)
	}
	// Heartbeats missed for more than three intervals: gone.
	clk.add(3500 * time.Millisecond)
	list, _ = b.List(ctx)
	if !list[1].Alive || !list[1].Self || list[1].HeartbeatAgeMS != 5000 || list[0].Alive {
		t.Errorf("3.5 s after a's last heartbeat, 5 s after b's: %+v; want a gone, b (which answers) alive with its heartbeat's age", list)
	}

	// Run beats at once, and removes the record when it stops.
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); a.Run(rctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, _ = b.List(ctx)
		if list[0].HeartbeatAgeMS == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if list[0].ID != "host-a" || !list[0].Alive {
		t.Errorf("while a runs: %+v; want a alive", list)
	}
	cancel()
	<-done
	list, _ = b.List(ctx)
	if len(list) != 1 || list[0].ID != "host-b" {
		t.Errorf("after a stopped: %+v; want b alone", list)
	}
}

func TestIDs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "home", "host-id")
	id, err := hosts.LoadID(file)
	if err != nil || hosts.ValidID(id) != nil {
		t.Fatalf("LoadID = %q, %v; want a valid new id", id, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("host id file: %v, %v; want mode 0600", fi, err)
	}
	again, err := hosts.LoadID(file)
	if err != nil || again != id {
		t.Errorf("LoadID again = %q, %v; want %q kept", again, err, id)
	}
	for _, bad := range []string{"", "-x", "a b", "a/b", "../x", string(make([]byte, 64))} {
		if hosts.ValidID(bad) == nil {
			t.Errorf("ValidID(%q) = nil; want it refused", bad)
		}
	}
	if err := os.WriteFile(file, []byte("../../etc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := hosts.LoadID(file); err == nil {
		t.Error("LoadID of a file holding an invalid id: no error")
	}
	if _, err := hosts.New(hosts.Config{Store: wiring.Hosts{}, ID: "a b"}); err == nil {
		t.Error("New with an invalid id: no error")
	}
}
