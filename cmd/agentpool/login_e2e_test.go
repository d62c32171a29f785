package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/registry"
)

// waitProviderStatus waits until provider id has status want.
func waitProviderStatus(t *testing.T, d *daemon, id, want string) registry.ProviderStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		snap, err := d.client.Providers(context.Background())
		if err == nil {
			if p, ok := snap.Provider(id); ok && p.Status == want {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider %q never got status %s: %+v, %v\n%s", id, want, snap, err, d.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEndToEndAgentLogin: an agent that needs a login shows as needs_auth
// with its ways to log in; a session's turn fails saying to run agentpool
// login, not as a crash; agentpool login has the agent log in (it keeps
// the credentials in its own state directory), after which the provider is
// ready and the session's next turn works. A method the user carries out
// is explained, not sent to the agent.
func TestEndToEndAgentLogin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	state := filepath.Join(t.TempDir(), "agent-state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	login := filepath.Join(state, "credentials")
	exe, _ := os.Executable()
	raw, _ := json.Marshal(agenttest.Script{LoginFile: login, AuthMethods: json.RawMessage(`[
		{"id": "oauth", "name": "Log in with a browser"},
		{"id": "key", "name": "API key", "type": "env_var", "vars": [{"name": "FAKE_API_KEY"}], "link": "javascript:alert(1)"}]`)})
	env := map[string]string{agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(raw),
		"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "GORACE": "atexit_sleep_ms=0"}
	doc := map[string]any{"version": 1, "providers": map[string]any{
		"fake": map[string]any{"extends": "acp", "command": []string{exe}, "env": env, "sandbox": map[string]any{"write": []string{state}}},
	}}
	b, _ := json.Marshal(doc)
	if err := os.WriteFile(filepath.Join(home, providersFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, bin, home)
	defer func() {
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
	}()
	p := waitProviderStatus(t, d, "fake", registry.StatusNeedsAuth)
	if p.Probe == nil || len(p.Probe.Auth) != 2 || !strings.Contains(p.Diagnostic, "agentpool login fake") {
		t.Errorf("provider = %+v; want its login methods and the command", p)
	}
	out, _ := d.cli("providers", "list")
	if !strings.Contains(out, "needs_auth") || !strings.Contains(out, "agentpool login fake") {
		t.Errorf("providers list:\n%s\nwant needs_auth and the command", out)
	}

	repo := newE2ERepo(t)
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "fake", "--no-warm")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	id := d.newSessionID(out)
	out, _ = d.cli("prompt", id, "hello")
	if !strings.Contains(out, "agentpool login fake") {
		t.Errorf("prompt before the login:\n%s\nwant the login command", out)
	}

	out, err = d.cli("login", "fake")
	if err == nil || !strings.Contains(out, "--method") || !strings.Contains(out, "oauth (agent") {
		t.Errorf("login with two methods and no terminal = %v:\n%s\nwant the choice", err, out)
	}
	out, err = d.cli("login", "fake", "--method", "key")
	if err != nil || !strings.Contains(out, "FAKE_API_KEY") {
		t.Errorf("login --method key = %v:\n%s\nwant the variable to set", err, out)
	}
	if _, err := os.Stat(login); err == nil {
		t.Fatal("the env_var method logged the agent in")
	}
	out, err = d.cli("login", "fake", "--method", "oauth")
	if err != nil || !strings.Contains(out, "fake is logged in (status: ready)") {
		t.Fatalf("login --method oauth = %v:\n%s\ndaemon log:\n%s", err, out, d.out)
	}
	if _, err := os.Stat(login); err != nil {
		t.Errorf("the agent kept no credentials: %v", err)
	}
	out, err = d.cli("prompt", id, "hello again")
	if err != nil || strings.Contains(out, "agentpool login") {
		t.Errorf("prompt after the login = %v:\n%s", err, out)
	}
}
