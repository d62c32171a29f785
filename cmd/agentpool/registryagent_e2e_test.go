package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/registry"
)

// TestEndToEndRegistryAgent walks a new user's way with an agent added
// from the ACP registry's own files (testdata/registry-auggie.json, a
// stand-in for auggie: the test binary, which makes ~/.augment at start
// and refuses session/new until ~/.augment/session.json exists, offering
// no ACP login method), through the real binary:
//   - it cannot make ~/.augment; the error says to add it to
//     sandbox.write, once, with its stderr once and "start agent" once;
//   - after three such crashes prompts are refused, saying how to retry
//     now; a changed provider clears that;
//   - with "~/.augment" in sandbox.write (and a first sandbox.read entry
//     of the user's), the daemon makes it, and the agent starts;
//   - it needs a login it cannot do over ACP: prompt, providers list and
//     login show its own words and the command they name, never
//     "agentpool login auggie";
//   - logged in by hand and probed, it works, and git in it still reads
//     the user's ~/.gitconfig.
func TestEndToEndRegistryAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	f := newConfineFixture(t)
	if err := os.WriteFile(filepath.Join(f.fakeHome, ".gitconfig"), []byte("[test]\n\tmarker = from-home\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	readable := filepath.Join(t.TempDir(), "models")
	if err := os.MkdirAll(readable, 0o755); err != nil {
		t.Fatal(err)
	}
	d := f.start(t)

	src, err := filepath.Abs(filepath.Join("testdata", "registry-auggie.json"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := d.cli("providers", "catalog", "--from", src); err != nil || !strings.Contains(out, "auggie") {
		t.Fatalf("providers catalog --from %s = %v:\n%s", src, err, out)
	}
	out, err := d.cli("providers", "add", "auggie")
	if err != nil {
		t.Fatalf("providers add auggie: %v\n%s", err, out)
	}
	// "Install" it where the catalog put its command.
	bin := filepath.Join(f.fakeHome, ".local", "share", "agentpool", "agents", "auggie", "0.21.0", "auggie")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.exe, bin); err != nil {
		t.Fatal(err)
	}
	if out, err := d.cli("providers", "refresh"); err != nil {
		t.Fatalf("providers refresh: %v\n%s", err, out)
	}
	augment := filepath.Join(f.fakeHome, ".augment")

	out, err = d.cli("session", "new", "--repo", f.repo, "--agent", "auggie", "--no-warm")
	if err != nil {
		t.Fatalf("session new: %v\n%s\ndaemon log:\n%s", err, out, d.out)
	}
	id := d.newSessionID(out)

	// It cannot make ~/.augment: the error says to grant it, once.
	for i := range 3 {
		out, _ = d.cli("prompt", id, "hello")
		if !strings.Contains(out, `"~/.augment"`) || !strings.Contains(out, "sandbox.write") {
			t.Fatalf("prompt %d without ~/.augment:\n%s\nwant the hint to add \"~/.augment\" to sandbox.write", i+1, out)
		}
		if n := strings.Count(out, `start agent "auggie"`); n != 1 {
			t.Errorf("prompt %d says start agent %d times; want once:\n%s", i+1, n, out)
		}
		if n := strings.Count(out, "mkdir '"+augment+"'"); n != 1 {
			t.Errorf("prompt %d shows the agent's stderr line %d times; want once:\n%s", i+1, n, out)
		}
	}
	out, _ = d.cli("prompt", id, "hello")
	if !strings.Contains(out, "keeps crashing") || !strings.Contains(out, "providers refresh auggie") {
		t.Fatalf("prompt after 3 crashes:\n%s\nwant the crash-loop refusal saying how to retry now", out)
	}
	if _, err := os.Stat(augment); err == nil {
		t.Fatal("~/.augment exists before it is granted")
	}

	// The user grants it (and reads a directory of their own, the first
	// sandbox.read entry they write).
	setAuggieSandbox(t, filepath.Join(f.home, providersFile), map[string]any{"write": []string{"~/.augment"}, "read": []string{readable}})
	waitProviderSandbox(t, d, "auggie", augment)
	out, err = d.cli("prompt", id, "hello")
	if err == nil || strings.Contains(out, "keeps crashing") {
		t.Fatalf("prompt after the fix = %v:\n%s\nwant it started again (a changed provider clears the crashes), then refused for the login", err, out)
	}
	if st, err := os.Stat(augment); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("~/.augment after the launch: %v, %v; want a directory of mode 0700 made by the daemon", st, err)
	}
	const words = "Auggie does not currently support authenticating over ACP. Please run `auggie login` from your terminal"
	if !strings.Contains(out, words) || strings.Contains(out, "agentpool login auggie") || !strings.Contains(out, "auggie login") {
		t.Errorf("prompt before the login:\n%s\nwant the agent's words and `auggie login`, not agentpool login", out)
	}
	if strings.Contains(out, `start agent "auggie": start agent`) {
		t.Errorf("prompt wraps the start error twice:\n%s", out)
	}

	waitProviderStatus(t, d, "auggie", registry.StatusNeedsAuth)
	out, _ = d.cli("providers", "list")
	if !strings.Contains(out, "needs_auth") || !strings.Contains(out, "Auggie does not currently support") ||
		!strings.Contains(out, "auggie login") || strings.Contains(out, "agentpool login auggie") {
		t.Errorf("providers list:\n%s\nwant needs_auth with the agent's words and its login command, not agentpool login", out)
	}
	out, err = d.cli("login", "auggie")
	if err == nil || !strings.Contains(out, "Auggie does not currently support") || !strings.Contains(out, "auggie login") ||
		strings.Contains(out, "offers no login method:") {
		t.Errorf("login auggie = %v:\n%s\nwant the agent's words and its login command", err, out)
	}

	// Logged in its own way, then probed: ready, and it works; git in
	// the sandbox reads ~/.gitconfig though sandbox.read lists only the
	// user's directory.
	if err := os.WriteFile(filepath.Join(augment, "session.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := d.cli("providers", "refresh", "auggie"); err != nil {
		t.Fatalf("providers refresh auggie after the login: %v\n%s\ndaemon log:\n%s", err, out, d.out)
	}
	waitProviderStatus(t, d, "auggie", registry.StatusReady)
	res := results(t, d, id)
	if len(res) != 1 || res[0].Exit != 0 || strings.TrimSpace(res[0].Data) != "from-home" {
		t.Fatalf("git config --get test.marker in the sandbox = %+v; want from-home (~/.gitconfig readable whatever sandbox.read says)", res)
	}
}

// setAuggieSandbox sets the "sandbox" of provider auggie in the
// providers.json at path.
func setAuggieSandbox(t *testing.T, path string, sb map[string]any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("providers.json: %v\n%s", err, b)
	}
	doc["providers"].(map[string]any)["auggie"].(map[string]any)["sandbox"] = sb
	if b, err = json.MarshalIndent(doc, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitProviderSandbox waits until provider id's effective sandbox may
// write path.
func waitProviderSandbox(t *testing.T, d *daemon, id, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		snap, err := d.client.Providers(context.Background())
		if err == nil {
			if p, ok := snap.Provider(id); ok && slices.Contains(p.Sandbox.Write, path) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider %q never got %s in sandbox.write: %v\n%s", id, path, err, d.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
