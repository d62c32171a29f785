package registry

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/google/go-cmp/cmp"
)

// TestPassEnv: "pass_env" replaces the inherited list (a built-in's
// included), an extending provider inherits it, and the status shows the
// names and what of the provider's env its agents do not get.
func TestPassEnv(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp", "claude-agent-acp", "gemini", "t", "agentpool")
	f.write(t, `{
  "version": 1,
  "providers": {
    "codex": {"pass_env": ["OPENAI_API_KEY", "AZURE_OPENAI_*"]},
    "claude-work": {"extends": "claude"},
    "claude-none": {"extends": "claude", "pass_env": []},
    "gemini": {"env": {"HTTPS_PROXY": "http://proxy:3128", "no_proxy": "localhost", "GEMINI_CLI_NO_RELAUNCH": "true"}, "pass_env": ["GEMINI_API_KEY", "ALL_PROXY"]},
    "t": {"extends": "pty", "command": ["t"], "pass_env": ["T_KEY"]}
  }
}`)
	r := open(t, f.config())
	tests := []struct {
		id    string
		pass  []string
		notes []string
	}{
		{"codex", []string{"OPENAI_API_KEY", "AZURE_OPENAI_*"}, nil},
		{"claude", builtinPassEnv(ProviderClaude), nil},
		{"claude-work", builtinPassEnv(ProviderClaude), nil},
		{"claude-none", []string{}, nil},
		{"gemini", []string{"GEMINI_API_KEY", "ALL_PROXY"}, []string{"env HTTPS_PROXY is not passed", "env no_proxy is not passed", "pass_env ALL_PROXY is not passed"}},
		{"t", []string{"T_KEY"}, nil},
		{"demo", nil, nil},
	}
	snap := r.Snapshot()
	for _, tt := range tests {
		spec, err := r.Resolve(tt.id)
		if err != nil {
			t.Fatalf("Resolve(%q) error = %v", tt.id, err)
		}
		if diff := cmp.Diff(tt.pass, spec.PassEnv); diff != "" {
			t.Errorf("Resolve(%q).PassEnv mismatch (-want +got):\n%s", tt.id, diff)
		}
		st, _ := snap.Provider(tt.id)
		if !slices.Equal(st.PassEnv, tt.pass) {
			t.Errorf("status of %q: pass_env %q; want %q", tt.id, st.PassEnv, tt.pass)
		}
		if len(st.EnvNotes) != len(tt.notes) {
			t.Errorf("status of %q: env notes %q; want %d", tt.id, st.EnvNotes, len(tt.notes))
			continue
		}
		for i, want := range tt.notes {
			if !strings.HasPrefix(st.EnvNotes[i], want) {
				t.Errorf("status of %q: env note %d = %q; want it to start with %q", tt.id, i, st.EnvNotes[i], want)
			}
		}
	}
}

// TestBuiltinPassEnvNamesVariables: every built-in's list is valid, and
// passes no secret of the daemon.
func TestBuiltinPassEnvNamesVariables(t *testing.T) {
	for _, d := range builtins("/bin/agentpool") {
		for _, p := range d.passEnv {
			if msg := backends.CheckPassEnv(p); msg != "" {
				t.Errorf("built-in %q pass_env %q: %s", d.id, p, msg)
			}
			name := strings.TrimSuffix(p, "*")
			for _, secret := range []string{"PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "AZURE_CLIENT_SECRET", "AGENTPOOL_TOKEN"} {
				if backends.MatchEnv([]string{p}, secret) {
					t.Errorf("built-in %q passes %s through %q", d.id, secret, p)
				}
			}
			if (name == "GITHUB_TOKEN" || name == "GH_TOKEN") && d.id != ProviderCopilot {
				t.Errorf("built-in %q passes the forge token %s", d.id, name)
			}
		}
	}
}

// TestBuiltinPassEnvEndpoints: the built-ins pass the variables that
// point their agents at another endpoint of their model API (a gateway, a
// local server), as the agents read them; without them a confined agent
// talks to its vendor's default host instead, which its network list
// refuses.
func TestBuiltinPassEnvEndpoints(t *testing.T) {
	want := map[string][]string{
		ProviderClaude: {"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"},
		ProviderCodex:  {"OPENAI_BASE_URL", "OPENAI_API_KEY"},
		ProviderGemini: {"GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL", "GEMINI_API_KEY"},
		ProviderQwen:   {"OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"},
		ProviderCopilot: {"COPILOT_PROVIDER_BASE_URL", "COPILOT_PROVIDER_TYPE", "COPILOT_PROVIDER_API_KEY",
			"COPILOT_PROVIDER_BEARER_TOKEN", "COPILOT_MODEL"},
	}
	for id, names := range want {
		for _, name := range names {
			if !backends.MatchEnv(builtinPassEnv(id), name) {
				t.Errorf("built-in %q does not pass %s", id, name)
			}
		}
	}
}

// TestAuthEnvFromProbe: the variables an agent's env_var login methods
// name become Spec.AuthEnv, but for those only the owner may pass; a
// probe that failed for want of them is made again with them, without
// making the probe stale or the spec changed.
func TestAuthEnvFromProbe(t *testing.T) {
	t.Setenv("FAKE_API_KEY", "k")
	f := newFixture(t)
	f.install(t, "codex-acp")
	methods := []backends.AuthMethod{
		{ID: "oauth", Type: backends.AuthAgent},
		{ID: "key", Type: backends.AuthEnvVar, Vars: []string{"FAKE_API_KEY", "FAKE_BASE_URL"}},
		{ID: "greedy", Type: backends.AuthEnvVar, Vars: []string{"PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "AGENTPOOL_TOKEN", "HTTPS_PROXY", "BAD NAME", "OPENAI_API_KEY"}},
	}
	var (
		mu   sync.Mutex
		seen [][]string
	)
	prober := &fakeProber{probe: func(ctx context.Context, spec backends.Spec) (backends.Info, error) {
		mu.Lock()
		seen = append(seen, slices.Clone(spec.AuthEnv))
		mu.Unlock()
		info := backends.Info{AgentName: "fake", Auth: methods}
		if !slices.Contains(spec.AuthEnv, "FAKE_API_KEY") {
			return info, fmt.Errorf("session/new: %w", backends.ErrAuthRequired)
		}
		return info, nil
	}}
	cfg := f.config()
	cfg.Prober, cfg.ProbeTTL = prober, -1
	r := open(t, cfg)
	_, ch, unsubscribe := r.Subscribe()
	defer unsubscribe()
	info, err := r.Probe(context.Background(), "codex")
	if err != nil || info.NeedsAuth {
		t.Fatalf("Probe(codex) = %+v, %v; want a success at the second try", info, err)
	}
	mu.Lock()
	if want := [][]string{nil, {"FAKE_API_KEY"}}; !cmp.Equal(seen, want) {
		t.Errorf("probes made with AuthEnv %q; want %q", seen, want)
	}
	mu.Unlock()
	spec, err := r.Resolve("codex")
	if err != nil {
		t.Fatal(err)
	}
	// OPENAI_API_KEY is codex's anyway; FAKE_BASE_URL is not set, but
	// named: it passes once set.
	if want := []string{"FAKE_API_KEY", "FAKE_BASE_URL", "OPENAI_API_KEY"}; !slices.Equal(spec.AuthEnv, want) {
		t.Errorf("Resolve(codex).AuthEnv = %q; want %q", spec.AuthEnv, want)
	}
	st, _ := r.Snapshot().Provider("codex")
	if st.Status != StatusReady || st.Probe == nil {
		t.Errorf("status %q, probe %+v; want ready with the probe kept", st.Status, st.Probe)
	}
	notes := strings.Join(st.EnvNotes, "\n")
	for _, v := range []string{"PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "AGENTPOOL_TOKEN", "HTTPS_PROXY", `"BAD NAME"`} {
		if !strings.Contains(notes, " "+v+",") && !strings.Contains(notes, v+", which") {
			t.Errorf("env notes do not say why %s is not passed:\n%s", v, notes)
		}
	}
	// Learning AuthEnv changes no launch: no agent restarts for it.
	for {
		select {
		case c := <-ch:
			if slices.Contains(c.SpecChanged, "codex") {
				t.Fatalf("change %+v: codex's spec changed with its AuthEnv", c)
			}
			continue
		default:
		}
		break
	}
}
