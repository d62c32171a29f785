package wiring

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/worktree"
)

// TestTerminalEnvironment: a terminal the bridge runs for an agent gets
// the agent's allow-listed variables of the daemon's environment, the git
// identity and what its terminal/create asks for; not the daemon's
// secrets, nor the provider's own env.
func TestTerminalEnvironment(t *testing.T) {
	for k, v := range map[string]string{
		"PGPASSWORD": "store-password", "AWS_SECRET_ACCESS_KEY": "aws-secret", "GITHUB_TOKEN": "gh-token",
		"AGENTPOOL_TOKEN": "api-token", "ANTHROPIC_API_KEY": "sk-ant", "OTHER_KEY": "other",
	} {
		t.Setenv(k, v)
	}
	script := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Terminal: &agenttest.Terminal{
		Command: "env", Env: map[string]string{"ASKED": "by-the-agent"}}}}}}}
	spec := agenttest.Spec("fake", script)
	spec.Env = append(spec.Env, "PROVIDER_ONLY=1")
	spec.PassEnv = []string{"ANTHROPIC_API_KEY"}
	spec.Dir = t.TempDir()
	l := Launcher{Identity: func(context.Context, string) worktree.Identity {
		return worktree.Identity{Name: "Ada", Email: "ada@example.invalid"}
	}}
	var texts []string
	emit := func(ev backends.Event) {
		var c backends.ChunkData
		if ev.Type == backends.EventMessageChunk && json.Unmarshal(ev.Data, &c) == nil {
			texts = append(texts, c.Text)
		}
	}
	b, err := l.Launch(pool.LaunchRequest{Spec: spec, Session: "s1", Worktree: pool.Worktree{Session: "s1", Repo: "/nowhere", Path: spec.Dir}, Emit: func(backends.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer func() { _ = b.Stop(ctx) }()
	if _, err := b.Start(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Prompt(ctx, backends.Prompt{Text: "run env", Turn: 1}, emit); err != nil {
		t.Fatal(err)
	}
	out := strings.Join(texts, "\n")
	if !strings.Contains(out, "terminal output: ") {
		t.Fatalf("no terminal output in %q", out)
	}
	out = strings.ReplaceAll(out, "terminal output: ", "\n")
	for _, want := range []string{"\nPATH=", "\nANTHROPIC_API_KEY=sk-ant", "\nASKED=by-the-agent", "\nGIT_CONFIG_VALUE_0=Ada"} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal's environment lacks %q:\n%s", strings.TrimPrefix(want, "\n"), out)
		}
	}
	for _, not := range []string{"PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "AGENTPOOL_TOKEN", "OTHER_KEY", "PROVIDER_ONLY", agenttest.EnvScript} {
		if strings.Contains(out, not+"=") {
			t.Errorf("the terminal's environment has %s:\n%s", not, out)
		}
	}
}
