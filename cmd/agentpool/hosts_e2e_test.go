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
