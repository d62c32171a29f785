package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/registry"
)

// TestEndToEndAgentEnvironment: a daemon started with its store's
// password, cloud credentials and a forge token in its environment hands
// none of them to its agents (`env | grep ^PG` finds nothing): an agent
// gets the base variables, the API key of its own service only when its
// provider passes it, the "pass_env" names of its provider, and the
// variable its env_var login method names. Its proxy variables are the
// daemon's egress proxy, not its provider's. A trusted setup keeps the
// private registry's token but not the daemon's secrets.
func TestEndToEndAgentEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	turn := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{Sys: &agenttest.SysOp{Op: agenttest.OpEnv, Names: []string{"*"}}},
		{Sys: &agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"/bin/sh", "-c", "env | grep -c '^PG'"}}},
	}}}}
	login := turn
	login.LoginEnv = "FAKE_API_KEY"
	login.AuthMethods = json.RawMessage(`[{"id": "key", "name": "API key", "type": "env_var", "vars": [{"name": "FAKE_API_KEY"}]},
		{"id": "greedy", "name": "More", "type": "env_var", "vars": [{"name": "PGPASSWORD"}, {"name": "AWS_SECRET_ACCESS_KEY"}]}]`)
	provider := func(extends string, s agenttest.Script, passEnv []string) map[string]any {
		raw, _ := json.Marshal(s)
		p := map[string]any{"extends": extends, "command": []string{exe}, "env": map[string]string{
			agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(raw),
			"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "GORACE": "atexit_sleep_ms=0",
			"HTTPS_PROXY": "http://provider-proxy.invalid:3128"}}
		if passEnv != nil {
			p["pass_env"] = passEnv
		}
		return p
	}
	doc := map[string]any{"version": 1, "providers": map[string]any{
		"plain":   provider("acp", turn, nil),
		"claude2": provider("claude", turn, nil),
		"passer":  provider("acp", turn, []string{"MY_TOOL_*"}),
		"login":   provider("acp", login, nil),
	}}
	b, _ := json.Marshal(doc)
	if err := os.WriteFile(home+"/"+providersFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, bin, home, "PGPASSWORD=store-password", "PGPASSFILE=/nowhere/.pgpass",
		"AWS_SECRET_ACCESS_KEY=aws-secret", "GITHUB_TOKEN=gh-token", "ANTHROPIC_API_KEY=sk-ant",
		"MY_TOOL_KEY=mine", "FAKE_API_KEY=fake-key", "NPM_TOKEN=npm-token", "AGENTPOOL_TOKEN=api-token")
	d.stopAtCleanup()
	for _, id := range []string{"plain", "claude2", "passer", "login"} {
		waitProviderReady(t, d, id)
	}
	if p := waitProviderStatus(t, d, "login", registry.StatusReady); len(p.EnvNotes) == 0 ||
		!strings.Contains(strings.Join(p.EnvNotes, "\n"), "env HTTPS_PROXY is not passed") ||
		!strings.Contains(strings.Join(p.EnvNotes, "\n"), "name PGPASSWORD, which it gets only if") {
		t.Errorf("provider login's env notes = %q; want the proxy and PGPASSWORD explained", p.EnvNotes)
	}

	repo := setupRepo(t, d, `{"setup": {"command": ["sh", "-c", "echo \"npm=[$NPM_TOKEN] pg=[$PGPASSWORD$PGPASSFILE] aws=[$AWS_SECRET_ACCESS_KEY] token=[$AGENTPOOL_TOKEN]\""]}}`)
	never := []string{"PGPASSWORD", "PGPASSFILE", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "AGENTPOOL_TOKEN", "NPM_TOKEN"}
	// The provider's proxy is not passed: the agent's proxy variables
	// name the daemon's egress proxy inside its network namespace.
	egressHTTP := fmt.Sprintf("http://127.0.0.1:%d", sandbox.EgressProxyPort)
	proxies := map[string]string{"HTTPS_PROXY": egressHTTP, "https_proxy": egressHTTP, "HTTP_PROXY": egressHTTP, "http_proxy": egressHTTP,
		"ALL_PROXY": fmt.Sprintf("socks5h://127.0.0.1:%d", sandbox.EgressProxyPort)}
	tests := []struct {
		id        string
		see, miss []string
	}{
		{"plain", []string{"PATH", "HOME"}, []string{"ANTHROPIC_API_KEY", "MY_TOOL_KEY", "FAKE_API_KEY"}},
		{"claude2", []string{"ANTHROPIC_API_KEY"}, []string{"MY_TOOL_KEY", "FAKE_API_KEY"}},
		{"passer", []string{"MY_TOOL_KEY"}, []string{"ANTHROPIC_API_KEY", "FAKE_API_KEY"}},
		{"login", []string{"FAKE_API_KEY"}, []string{"ANTHROPIC_API_KEY", "MY_TOOL_KEY"}},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			out, err := d.cli("session", "new", "--repo", repo, "--agent", tt.id)
			if err != nil {
				t.Fatalf("session new: %v\n%s", err, out)
			}
			id := d.newSessionID(out)
			got := results(t, d, id)
			if len(got) != 2 || got[0].Op != agenttest.OpEnv || !got[0].OK() {
				t.Fatalf("sys results %+v; want the agent's environment and its grep", got)
			}
			env := got[0].Env()
			for _, k := range tt.see {
				if env[k] == "" {
					t.Errorf("agent %q does not see %s", tt.id, k)
				}
			}
			for _, k := range append(tt.miss, never...) {
				if v, ok := env[k]; ok {
					t.Errorf("agent %q sees %s=%q", tt.id, k, v)
				}
			}
			for k, want := range proxies {
				if env[k] != want {
					t.Errorf("agent %q sees %s=%q; want the daemon's egress, %q", tt.id, k, env[k], want)
				}
			}
			for k, v := range env {
				if strings.Contains(v, "provider-proxy.invalid") {
					t.Errorf("agent %q sees its provider's proxy in %s=%q", tt.id, k, v)
				}
			}
			if got[1].Data != "0\n" {
				t.Errorf("env | grep -c '^PG' in agent %q printed %q; want 0", tt.id, got[1].Data)
			}
			if tt.id == "plain" {
				const want = "npm=[npm-token] pg=[] aws=[aws-secret] token=[]"
				if setup := setupOutput(t, d, id); !strings.Contains(setup, want) {
					t.Errorf("the setup printed %q; want %q", setup, want)
				}
			}
		})
	}
}

// setupOutput returns the output lines of session id's setup.
func setupOutput(t *testing.T, d *daemon, id string) string {
	t.Helper()
	evs, err := d.client.EventLog(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Type == backends.EventType("setup.output") {
			out = append(out, string(ev.Data))
		}
	}
	return strings.Join(out, "\n")
}
