package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/pool"
)

// A provider's "spares" in providers.json keeps spares without a flag,
// and an edit of the file (here through PATCH /v1/providers, which
// rewrites it) takes effect without a restart: the count grows, and 0
// discards them.
func TestEndToEndSparesFromProvidersJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# project\n"})
	writeScripted(t, home, bin, map[string]any{"slow": spareScript(100)})
	d := startDaemon(t, bin, home, "AGENTPOOL_WORKTREES="+filepath.Join(t.TempDir(), "trees"), "AGENTPOOL_SPARES_REPOS="+repo)
	d.stopAtCleanup()
	ctx := context.Background()
	st, err := d.client.Pool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Spares) != 0 {
		t.Fatalf("spares %+v with none asked for", st.Spares)
	}
	patch := func(n int) {
		t.Helper()
		if _, err := d.client.PatchProvider(ctx, "slow", json.RawMessage(`{"spares": `+strconv.Itoa(n)+`}`), ""); err != nil {
			t.Fatalf("PATCH spares %d: %v", n, err)
		}
	}
	patch(1)
	d.waitSpares("one ready after providers.json asked for one", readySpares(1, ""))
	provs, err := d.client.Providers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range provs.Providers {
		if p.ID == "slow" && p.Spares != 1 {
			t.Errorf("GET /v1/providers: slow has spares %d; want 1", p.Spares)
		}
	}
	patch(2)
	d.waitSpares("two ready after the count grew", readySpares(2, ""))
	patch(0)
	d.waitSpares("discarded after the count went to 0", func(sp []pool.SpareStatus) bool { return len(sp) == 0 })
	// A bad count is refused, naming the field, and the last good file
	// stays.
	if _, err := d.client.PatchProvider(ctx, "slow", json.RawMessage(`{"spares": 99}`), ""); err == nil {
		t.Error("PATCH spares 99 accepted; want it refused")
	} else if !strings.Contains(err.Error(), "spares") {
		t.Errorf("PATCH spares 99: %v; want an error naming spares", err)
	}
}
