package backends

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// daemonEnv is a daemon's environment full of what no agent should get.
var daemonEnv = []string{
	"PATH=/usr/bin:/bin", "HOME=/home/u", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "TMPDIR=/tmp",
	"XDG_CONFIG_HOME=/home/u/.config", "SSL_CERT_FILE=/etc/ssl/ca.pem",
	"PGPASSWORD=store-password", "PGHOST=db", "AWS_SECRET_ACCESS_KEY=aws", "AZURE_CLIENT_SECRET=az",
	"GITHUB_TOKEN=gh", "AGENTPOOL_TOKEN=api-token", "AGENTPOOL_HOME=/home/u/.agentpool",
	"XDG_RUNTIME_DIR=/run/user/1000", "DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus",
	"DISPLAY=:0", "SSH_AUTH_SOCK=/run/user/1000/ssh", "HTTPS_PROXY=http://corp:3128",
	"ANTHROPIC_API_KEY=sk-ant", "AIDER_MODEL=sonnet", "AIDER_DARK_MODE=1", "FAKE_API_KEY=fake",
}

func names(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		out = append(out, k)
	}
	return out
}

func TestAgentEnvAllowList(t *testing.T) {
	base := []string{"PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "XDG_CONFIG_HOME", "SSL_CERT_FILE"}
	tests := []struct {
		name string
		spec Spec
		want []string
	}{
		{"base only", Spec{}, base},
		{"pass_env", Spec{PassEnv: []string{"ANTHROPIC_API_KEY", "AIDER_*"}},
			append(slices.Clone(base), "ANTHROPIC_API_KEY", "AIDER_MODEL", "AIDER_DARK_MODE")},
		{"owner names a secret", Spec{PassEnv: []string{"PGPASSWORD", "GITHUB_TOKEN"}},
			append(slices.Clone(base), "PGPASSWORD", "GITHUB_TOKEN")},
		{"never, whatever the provider says", Spec{PassEnv: []string{"AGENTPOOL_*", "XDG_*", "SSH_AUTH_SOCK", "HTTPS_PROXY"}}, base},
		{"login methods", Spec{AuthEnv: []string{"FAKE_API_KEY", "PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "AGENTPOOL_TOKEN", "HTTPS_PROXY"}},
			append(slices.Clone(base), "FAKE_API_KEY")},
		{"provider env", Spec{Env: []string{"QWEN_CODE_NO_RELAUNCH=true", "https_proxy=http://p:1", "NO_PROXY=x", "LANG=fr_FR.UTF-8"}},
			append(slices.Clone(base), "QWEN_CODE_NO_RELAUNCH", "LANG")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := agentEnv(daemonEnv, tt.spec, nil)
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("agentEnv(%+v) names mismatch (-want +got):\n%s", tt.spec, diff)
			}
		})
	}
	// The provider's value comes last, so it wins.
	got := agentEnv(daemonEnv, Spec{Env: []string{"LANG=fr_FR.UTF-8"}}, []string{"TERM=dumb"})
	if got[len(got)-2] != "LANG=fr_FR.UTF-8" || got[len(got)-1] != "TERM=dumb" {
		t.Errorf("agentEnv tail = %q; want the provider's env, then extra", got[len(got)-2:])
	}
	if env := agentEnv(nil, Spec{}, nil); env == nil {
		t.Error("agentEnv of an empty environment is nil; exec would give the agent the daemon's whole one")
	}
}

func TestTrustedEnv(t *testing.T) {
	t.Setenv("PGPASSWORD", "store-password")
	t.Setenv("AGENTPOOL_TOKEN", "api-token")
	t.Setenv("NPM_TOKEN", "npm")
	got := strings.Join(TrustedEnv(), "\n")
	if strings.Contains(got, "PGPASSWORD=") || strings.Contains(got, "AGENTPOOL_TOKEN=") || !strings.Contains(got, "NPM_TOKEN=npm") {
		t.Errorf("TrustedEnv() = %q; want NPM_TOKEN without the daemon's secrets", got)
	}
}

func TestCheckPassEnv(t *testing.T) {
	for _, ok := range []string{"OPENAI_API_KEY", "AIDER_*", "_X", "a1", "PG*", "SSH_*"} {
		if msg := CheckPassEnv(ok); msg != "" {
			t.Errorf("CheckPassEnv(%q) = %q; want it accepted", ok, msg)
		}
	}
	for _, bad := range []string{"", "*", "1A", "A-B", "A*B", "A B", "AGENTPOOL_TOKEN", "AGENTPOOL_*", "SSH_AUTH_SOCK", "DISPLAY", "A=B"} {
		if msg := CheckPassEnv(bad); msg == "" {
			t.Errorf("CheckPassEnv(%q) accepted it", bad)
		}
	}
}

func TestEnvPaths(t *testing.T) {
	got := EnvPaths([]string{"CODEX_HOME=/old", "GOOGLE_APPLICATION_CREDENTIALS=/k/a.json", "CODEX_HOME=/new",
		"GEMINI_CLI_HOME=/g", "SSL_CERT_DIR=certs", "OPENAI_API_KEY=/not/a/path"})
	want := []EnvPath{{Name: "CODEX_HOME", Path: "/new", Write: true}, {Name: "GOOGLE_APPLICATION_CREDENTIALS", Path: "/k/a.json"},
		{Name: "GEMINI_CLI_HOME", Path: "/g/.gemini", Write: true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("EnvPaths mismatch (-want +got):\n%s", diff)
	}
}
