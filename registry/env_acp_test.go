package registry_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/registry"
)

// envOfAgent launches provider id as resolved by r through the real ACP
// backend, the fake agent reporting its whole environment in its turn,
// and returns that environment.
func envOfAgent(t *testing.T, r *registry.Registry, id string) map[string]string {
	t.Helper()
	spec, err := r.Resolve(id)
	if err != nil {
		t.Fatalf("Resolve(%q) error = %v", id, err)
	}
	spec.Dir = t.TempDir()
	var texts []string
	b, err := acp.New(acp.Config{Spec: spec, StopGrace: 200 * time.Millisecond, KillGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer func() { _ = b.Stop(ctx) }()
	if _, err := b.Start(ctx, ""); err != nil {
		t.Fatalf("start %q: %v", id, err)
	}
	_, err = b.Prompt(ctx, backends.Prompt{Text: "env", Turn: 1}, func(ev backends.Event) {
		var c backends.ChunkData
		if ev.Type == backends.EventMessageChunk && json.Unmarshal(ev.Data, &c) == nil {
			texts = append(texts, c.Text)
		}
	})
	if err != nil {
		t.Fatalf("prompt %q: %v", id, err)
	}
	for _, text := range texts {
		if res, ok := agenttest.ParseSysResult(text); ok && res.Op == agenttest.OpEnv {
			return res.Env()
		}
	}
	t.Fatalf("agent %q reported no environment; said %q", id, texts)
	return nil
}

// TestAgentEnvironment: an agent started through the real backend gets an
// allow-listed environment, not the daemon's: none of the daemon's
// secrets (its store's password, cloud credentials, a forge token, its
// own token), the API key of its own service only when its provider
// passes it, a "pass_env" name, and the variable its env_var login
// method names (learnt by the probe, which the agent failed without it).
func TestAgentEnvironment(t *testing.T) {
	for k, v := range map[string]string{
		"PGPASSWORD": "store-password", "AWS_SECRET_ACCESS_KEY": "aws-secret", "GITHUB_TOKEN": "gh-token",
		"AGENTPOOL_TOKEN": "api-token", "SSH_AUTH_SOCK": "/run/user/1/ssh", "ANTHROPIC_API_KEY": "sk-ant",
		"MY_TOOL_KEY": "mine", "MY_TOOL_URL": "https://tool.invalid", "FAKE_API_KEY": "fake-key",
		"HTTPS_PROXY": "http://daemon-proxy:3128", "LANG": "C.UTF-8",
	} {
		t.Setenv(k, v)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	turn := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{
		{Sys: &agenttest.SysOp{Op: agenttest.OpEnv, Names: []string{"*"}}}}}}}
	provider := func(extends string, s agenttest.Script, extra map[string]any) map[string]any {
		raw, _ := json.Marshal(s)
		p := map[string]any{"extends": extends, "command": []string{exe},
			"env": map[string]string{agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(raw),
				"HTTP_PROXY": "http://provider-proxy:3128"}}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	login := turn
	login.AuthMethods = json.RawMessage(`[{"id": "key", "name": "API key", "type": "env_var", "vars": [{"name": "FAKE_API_KEY"}]},
		{"id": "greedy", "name": "Everything", "type": "env_var", "vars": [{"name": "PGPASSWORD"}, {"name": "AWS_SECRET_ACCESS_KEY"}, {"name": "GITHUB_TOKEN"}]}]`)
	login.LoginEnv = "FAKE_API_KEY"
	path := filepath.Join(t.TempDir(), "providers.json")
	b, _ := json.Marshal(map[string]any{"version": 1, "providers": map[string]any{
		"plain":   provider("acp", turn, nil),
		"claude2": provider("claude", turn, nil),
		"passer":  provider("acp", turn, map[string]any{"pass_env": []string{"MY_TOOL_*", "HTTPS_PROXY"}}),
		"login":   provider("acp", login, nil),
	}})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := registry.New(registry.Config{Path: path, Prober: acp.Prober{}, ProbeTimeout: 20 * time.Second, ProbeTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if info, err := r.Probe(context.Background(), "login"); err != nil {
		t.Fatalf("Probe(login) = %+v, %v; want it logged in by FAKE_API_KEY", info, err)
	}

	never := []string{"PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "AGENTPOOL_TOKEN", "SSH_AUTH_SOCK", "HTTPS_PROXY", "HTTP_PROXY"}
	tests := []struct {
		id        string
		see, miss []string
	}{
		{"plain", []string{"PATH", "HOME", "LANG", agenttest.EnvHelper}, []string{"ANTHROPIC_API_KEY", "MY_TOOL_KEY", "FAKE_API_KEY"}},
		{"claude2", []string{"ANTHROPIC_API_KEY"}, []string{"MY_TOOL_KEY", "FAKE_API_KEY"}},
		{"passer", []string{"MY_TOOL_KEY", "MY_TOOL_URL"}, []string{"ANTHROPIC_API_KEY", "FAKE_API_KEY"}},
		{"login", []string{"FAKE_API_KEY"}, []string{"ANTHROPIC_API_KEY", "MY_TOOL_KEY"}},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			env := envOfAgent(t, r, tt.id)
			for _, k := range tt.see {
				if env[k] == "" {
					t.Errorf("agent %q does not see %s; its environment: %v", tt.id, k, keys(env))
				}
			}
			for _, k := range append(tt.miss, never...) {
				if v, ok := env[k]; ok {
					t.Errorf("agent %q sees %s=%q", tt.id, k, v)
				}
			}
		})
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
