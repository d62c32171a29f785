package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/hosts"
	"github.com/agentpool/agentpool/pool"
)

// TestEndToEndHosts runs a daemon alone on its store: it lists itself as
// the one host, with its address, capacity, load and ready providers; its
// id is kept across a restart; --advertise is checked; and a daemon that
// stopped cleanly is no longer listed by the next.
func TestEndToEndHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"scripted": spareScript(0)})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "hi\n"})
	d := startDaemon(t, bin, home, "AGENTPOOL_ADVERTISE=http://127.0.0.1:9/pool")
	ctx := context.Background()
	if _, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "scripted"}); err != nil {
		t.Fatal(err)
	}
	list, err := d.client.Hosts(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("GET /v1/hosts = %+v, %v; want this daemon alone", list, err)
	}
	h := list[0]
	if !h.Self || !h.Alive || h.Advertise != "http://127.0.0.1:9/pool" || h.Capacity != pool.DefaultMaxWarm || h.Sessions != 1 ||
		!slices.Contains(h.Providers, "scripted") {
		t.Errorf("the host = %+v; want itself, alive, advertised as given, max_warm, 1 session, the scripted provider", h)
	}
	id, err := os.ReadFile(filepath.Join(home, hostIDFile))
	if err != nil || strings.TrimSpace(string(id)) != h.ID {
		t.Errorf("host-id file = %q, %v; want %q", id, err, h.ID)
	}
	// GET /v1/providers names the hosts that can run each provider.
	snap, err := d.client.Providers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := snap.Provider("scripted"); !ok || !slices.Equal(p.Hosts, []string{h.ID}) {
		t.Errorf("provider scripted = %+v; want it on host %s", p, h.ID)
	}
	out, err := d.cli("hosts")
	if err != nil || !strings.Contains(out, h.ID+" *") || !strings.Contains(out, "http://127.0.0.1:9/pool") || !strings.Contains(out, "scripted") ||
		!strings.HasPrefix(out, "HOST") {
		t.Errorf("agentpool hosts: %v\n%s", err, out)
	}
	t.Logf("agentpool hosts:\n%s", out)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()

	// A bad --advertise is refused at start, saying what it wants.
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--advertise", "ftp://x")
	cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home, "XDG_STATE_HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--advertise") {
		t.Errorf("serve --advertise ftp://x: %v; want it refused naming the flag\n%s", err, out)
	}

	// Restarted, the daemon is the same host, alone (the stopped one left).
	d = startDaemon(t, bin, home)
	d.stopAtCleanup()
	list, err = d.client.Hosts(ctx)
	if err != nil || len(list) != 1 || list[0].ID != h.ID || !strings.HasPrefix(list[0].Advertise, "http://127.0.0.1:") {
		t.Errorf("hosts after a restart = %+v, %v; want %s alone, at its listen address", list, err, h.ID)
	}
}

// TestEndToEndHostsShareAPostgresStore runs two daemons (own homes and
// ports) on one PostgreSQL database: each lists both hosts, itself marked,
// each provider names the hosts that can run it (one of them only on the
// host whose providers.json has it), and a host that stops leaves the
// other's list.
func TestEndToEndHostsShareAPostgresStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	url := startPostgres(t)
	bin := agentpoolBinary(t)
	homeA, homeB := t.TempDir(), t.TempDir()
	writeScripted(t, homeA, bin, map[string]any{"only-a": spareScript(0)})
	keyFile := clusterKeyFile(t)
	key := clusterKeyEnv + "=" + keyFile
	// a reads the key from its data directory, b from the file named.
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(homeA, clusterKeyFileName), kb, 0o600); err != nil {
		t.Fatal(err)
	}
	a := startDaemon(t, bin, homeA, "AGENTPOOL_STORE="+url, "AGENTPOOL_HOST_ID=host-a", clusterKeyEnv+"=")
	a.stopAtCleanup()
	b := startDaemon(t, bin, homeB, "AGENTPOOL_STORE="+url, "AGENTPOOL_HOST_ID=host-b", key)
	ctx := context.Background()
	var list []hosts.Status
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		list, err = a.client.Hosts(ctx)
		if err == nil && len(list) == 2 || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || len(list) != 2 || list[0].ID != "host-a" || !list[0].Self || list[1].ID != "host-b" || list[1].Self ||
		!list[1].Alive || list[1].Advertise != b.client.BaseURL {
		t.Fatalf("hosts seen from a = %+v, %v; want a (self) and b, alive, at %s", list, err, b.client.BaseURL)
	}
	if fromB, err := b.client.Hosts(ctx); err != nil || len(fromB) != 2 || fromB[0].Self || !fromB[1].Self {
		t.Errorf("hosts seen from b = %+v, %v; want both, b marked", fromB, err)
	}
	// Providers name their hosts: only-a is in a's providers.json alone.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		snap, err := b.client.Providers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		demo, _ := snap.Provider("demo")
		_, onB := snap.Provider("only-a")
		if slices.Equal(demo.Hosts, []string{"host-a", "host-b"}) && !onB {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("providers seen from b: demo on %v, only-a in b's registry %v; want demo on both hosts and only-a not b's", demo.Hosts, onB)
		}
	}
	if snap, err := a.client.Providers(ctx); err == nil {
		if p, _ := snap.Provider("only-a"); !slices.Equal(p.Hosts, []string{"host-a"}) {
			t.Errorf("only-a seen from a runs on %v; want host-a alone", p.Hosts)
		}
	}
	// b stops: it leaves a's list.
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Wait()
	if list, err := a.client.Hosts(ctx); err != nil || len(list) != 1 || list[0].ID != "host-a" {
		t.Errorf("hosts after b stopped = %+v, %v; want a alone", list, err)
	}
}
