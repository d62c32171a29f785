package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/httpapi"
)

// TestProvidersRemove: `providers remove` deletes a custom provider's
// entry from providers.json and the daemon drops it at once; a built-in is
// refused with 409 built_in and a message that says to disable it, an
// unknown id with 404; the file keeps the other entries.
func TestProvidersRemove(t *testing.T) {
	bin := agentpoolBinary(t)
	home := t.TempDir()
	path := filepath.Join(home, providersFile)
	if err := os.WriteFile(path, []byte(browserProviders(t, bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()

	out, err := d.cli("providers", "remove", "flood")
	if err != nil || strings.TrimSpace(out) != "flood removed" {
		t.Fatalf("providers remove flood: %v\n%s", err, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), `"flood"`) || !strings.Contains(string(data), `"xss"`) || !strings.Contains(string(data), `"shell"`) {
		t.Errorf("providers.json after removing flood:\n%s", data)
	}
	snap, err := d.client.Providers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Provider("flood"); ok {
		t.Error("the daemon still has flood")
	}

	out, err = d.cli("providers", "remove", "claude")
	if err == nil || !strings.Contains(out, "disabled, not removed") {
		t.Errorf("providers remove claude: %v\n%s", err, out)
	}
	var ae *httpapi.Error
	if err := d.client.RemoveProvider(ctx, "claude"); !errors.As(err, &ae) || ae.Status != 409 || ae.Code != httpapi.CodeBuiltIn {
		t.Errorf("DELETE /v1/providers/claude error = %v; want 409 built_in", err)
	}
	if err := d.client.RemoveProvider(ctx, "flood"); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("DELETE of a removed provider error = %v; want 404", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(data) {
		t.Errorf("a refused remove changed providers.json:\n%s", after)
	}
}
