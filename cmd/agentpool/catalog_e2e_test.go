package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// catalogDoc is a registry document of two agents: one npx, one binary.
const catalogDoc = `{"version": "1.0.0", "agents": [
  {"id": "tiny", "name": "Tiny Agent", "version": "1.2.0", "description": "a small agent",
   "distribution": {"npx": {"package": "@tiny/agent", "args": ["--acp"], "env": {"TINY_MODE": "acp"}}}},
  {"id": "boxed", "name": "Boxed", "version": "0.3.0", "description": "a binary agent",
   "distribution": {"binary": {
     "linux-x86_64": {"archive": "https://example.test/boxed-x86_64.tar.gz", "cmd": "./boxed", "args": ["acp"]},
     "linux-aarch64": {"archive": "https://example.test/boxed-aarch64.tar.gz", "cmd": "./boxed", "args": ["acp"]}}}}
], "extensions": []}`

// TestEndToEndCatalog lists the built-in catalog, replaces it from a file
// and from a URL (an httptest server on 127.0.0.1), keeps it when given a
// bad document, and adds an agent as a provider, all through the real
// binary.
func TestEndToEndCatalog(t *testing.T) {
	bin := agentpoolBinary(t)
	home := t.TempDir()
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()

	out, err := d.cli("providers", "catalog")
	if err != nil {
		t.Fatalf("providers catalog: %v\n%s", err, out)
	}
	for _, want := range []string{"built-in snapshot", "claude-code-acp", "built-in", "amp-acp", "mistral-vibe", "minion-code"} {
		if !strings.Contains(out, want) {
			t.Errorf("providers catalog output lacks %q:\n%s", want, out)
		}
	}

	// From a file.
	file := filepath.Join(t.TempDir(), "registry.json")
	if err := os.WriteFile(file, []byte(catalogDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = d.cli("providers", "catalog", "--from", file, "--json")
	if err != nil {
		t.Fatalf("providers catalog --from %s: %v\n%s", file, err, out)
	}
	var listed struct {
		Source string `json:"source"`
		Agents []struct {
			ID         string   `json:"id"`
			Command    []string `json:"command"`
			Install    string   `json:"install"`
			Configured bool     `json:"configured"`
		} `json:"agents"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &listed); err != nil {
		t.Fatalf("providers catalog --json: %v\n%s", err, out)
	}
	if listed.Source != "file" || len(listed.Agents) != 2 || strings.Join(listed.Agents[0].Command, " ") != "npx -y @tiny/agent@1.2.0 --acp" ||
		!strings.HasPrefix(listed.Agents[1].Command[0], "~/.local/share/agentpool/agents/boxed/0.3.0/boxed") {
		t.Fatalf("providers catalog --from file = %+v; want tiny's npx command and boxed's unpacked path", listed)
	}
	if st, err := os.Stat(filepath.Join(home, catalogFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stored catalog: %v; want %s with mode 0600", err, catalogFile)
	}

	// A bad document is refused with the field named; the catalog stays.
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version": "1.0.0", "agents": [{"id": "x", "name": "X", "version": "1.0.0", "description": "d", "distribution": {"npx": {}}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = d.cli("providers", "catalog", "--from", bad)
	if err == nil || !strings.Contains(out, "agents[0].distribution.npx.package") {
		t.Fatalf("providers catalog --from bad = %v:\n%s\nwant a failure naming agents[0].distribution.npx.package", err, out)
	}
	if v, err := d.client.Catalog(context.Background()); err != nil || len(v.Agents) != 2 {
		t.Fatalf("after a refused document, the catalog = %d agents (%v); want the previous 2", len(v.Agents), err)
	}

	// From a URL: one agent less.
	var doc map[string]any
	if err := json.Unmarshal([]byte(catalogDoc), &doc); err != nil {
		t.Fatal(err)
	}
	doc["agents"] = doc["agents"].([]any)[:1]
	served, _ := json.Marshal(doc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/registry.json" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(served)
	}))
	ts.Listener = ln
	ts.Start()
	t.Cleanup(ts.Close)
	out, err = d.cli("providers", "catalog", "--from", ts.URL+"/registry.json")
	if err != nil || !strings.Contains(out, "tiny") || strings.Contains(out, "boxed") {
		t.Fatalf("providers catalog --from URL = %v:\n%s\nwant tiny only", err, out)
	}
	if out, err := d.cli("providers", "catalog", "--from", ts.URL+"/missing.json"); err == nil || !strings.Contains(out, "404") {
		t.Fatalf("providers catalog --from a missing URL = %v:\n%s\nwant a 404 failure", err, out)
	}

	// Adding an agent writes a provider with its command and prints the
	// install step.
	out, err = d.cli("providers", "add", "tiny")
	if err != nil {
		t.Fatalf("providers add tiny: %v\n%s", err, out)
	}
	if !strings.Contains(out, "install: npm install -g @tiny/agent@1.2.0") {
		t.Errorf("providers add tiny output lacks the install step:\n%s", out)
	}
	snap, err := d.client.Providers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p, ok := snap.Provider("tiny")
	if !ok || strings.Join(p.Command, " ") != "npx -y @tiny/agent@1.2.0 --acp" || p.Label != "Tiny Agent" {
		t.Fatalf("provider tiny = %+v (found %v); want the catalog's command and name", p, ok)
	}
	if b, err := os.ReadFile(filepath.Join(home, providersFile)); err != nil || !strings.Contains(string(b), `"TINY_MODE": "acp"`) {
		t.Errorf("providers.json = %s (%v); want tiny's env TINY_MODE=acp", b, err)
	}
	if out, err := d.cli("providers", "add", "tiny"); err == nil || !strings.Contains(out, "exists already") {
		t.Errorf("a second providers add tiny = %v:\n%s\nwant it refused", err, out)
	}
	out, err = d.cli("providers", "catalog")
	if err != nil || !strings.Contains(out, "configured") {
		t.Errorf("providers catalog after the add = %v:\n%s\nwant tiny configured", err, out)
	}
}
