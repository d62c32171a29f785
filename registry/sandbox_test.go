package registry

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/google/go-cmp/cmp"
)

// TestBuiltinSandboxDefaults spells out each built-in's policy as written:
// enabled, every port, git's configuration to read, its state directories
// and the common caches to write, and its state directories (not
// ~/.claude.json, a file) to make when they are missing.
func TestBuiltinSandboxDefaults(t *testing.T) {
	caches := []string{"~/.cache", "~/.npm", "~/go/pkg/mod"}
	claude := []string{"~/.claude", "~/.claude.json", "~/.cache/claude-cli-nodejs"}
	want := map[string][]string{
		ProviderClaude:    claude,
		ProviderClaudeCLI: claude,
		ProviderCodex:     {"~/.codex"},
		ProviderGemini:    {"~/.gemini"},
		ProviderQwen:      {"~/.qwen"},
		ProviderOpenCode:  {"~/.local/share/opencode", "~/.local/state/opencode", "~/.config/opencode", "~/.cache/opencode"},
		ProviderCopilot:   {"~/.copilot", "~/.cache/copilot"},
		ProviderGoose:     {"~/.config/goose", "~/.local/share/goose"},
		ProviderAider:     {"~/.aider"},
		ProviderDemo:      nil,
	}
	defs := builtins("/bin/agentpool")
	if len(defs) != len(want) {
		t.Errorf("builtins() has %d providers; want %d", len(defs), len(want))
	}
	for _, d := range defs {
		state, ok := want[d.id]
		if !ok {
			t.Errorf("built-in %q has no expected sandbox in this test", d.id)
			continue
		}
		w := backends.SandboxSpec{Enabled: true, Network: backends.NetworkAll,
			Read: []string{"~/.gitconfig", "~/.config/git"}, Write: append(append([]string{}, state...), caches...)}
		for _, p := range state {
			if p != "~/.claude.json" {
				w.MakeDirs = append(w.MakeDirs, p)
			}
		}
		if diff := cmp.Diff(w, d.sandbox); diff != "" {
			t.Errorf("built-in %q sandbox (-want +got):\n%s", d.id, diff)
		}
	}
}

// TestSandboxMerge: each field an entry sets replaces the inherited one,
// lists included; the fields it leaves out are inherited, along the
// extends chain too.
func TestSandboxMerge(t *testing.T) {
	doc := `{"version": 1, "providers": {
  "codex": {"sandbox": {"network": [443, 80, 443], "read": ["/opt/models/", "$WORKTREE/./vendor"]}},
  "gemini": {"sandbox": {"write": ["~/.gemini", "$WORKTREE"], "required": true}},
  "qwen": {"sandbox": {"enabled": false}},
  "opencode": {"sandbox": {}},
  "codex-offline": {"extends": "codex", "sandbox": {"network": "none", "required": true}},
  "codex-web": {"extends": "codex-offline", "sandbox": {"read": [], "network": "all"}},
  "amp": {"extends": "acp", "command": ["amp-acp"], "sandbox": {"write": ["~/.amp", "/var/cache/amp"]}},
  "term": {"extends": "pty", "command": ["t"], "sandbox": {"enabled": false, "network": [22]}},
  "codex-hosts": {"extends": "codex", "sandbox": {"network": ["api.openai.com", "*.OpenAI.com:443", 8443, "API.OPENAI.COM.", "[::1]:8080", "10.0.0.0/8"]}},
  "codex-open": {"extends": "codex-hosts", "sandbox": {"network": "all"}}
}}`
	defs, err := parseDocument("p.json", []byte(doc), builtins("/bin/agentpool"))
	if err != nil {
		t.Fatalf("parseDocument(%s) error = %v; want nil", doc, err)
	}
	with := func(s backends.SandboxSpec, change func(*backends.SandboxSpec)) backends.SandboxSpec {
		change(&s)
		return s
	}
	codex := with(defaultSandbox("~/.codex"), func(s *backends.SandboxSpec) {
		s.Read = []string{"/opt/models", "$WORKTREE/vendor"} // replaced, not appended; cleaned
		s.Network, s.Ports = backends.NetworkList, []uint16{80, 443}
	})
	offline := with(codex, func(s *backends.SandboxSpec) { s.Network, s.Ports, s.Required = backends.NetworkNone, nil, true })
	tests := []struct {
		id   string
		want backends.SandboxSpec
	}{
		{"codex", codex},
		{"codex-offline", offline},
		{"codex-web", with(offline, func(s *backends.SandboxSpec) { s.Read, s.Network = []string{}, backends.NetworkAll })},
		{"gemini", with(defaultSandbox("~/.gemini"), func(s *backends.SandboxSpec) {
			s.Write, s.Required = []string{"~/.gemini", "$WORKTREE"}, true
		})},
		{"qwen", with(defaultSandbox("~/.qwen"), func(s *backends.SandboxSpec) { s.Enabled = false })},
		{"opencode", defaultSandbox(stateDirs(ProviderOpenCode)...)},
		{"claude", defaultSandbox(stateDirs(ProviderClaude)...)},
		{"amp", with(defaultSandbox(), func(s *backends.SandboxSpec) {
			// The user's directories are made before a launch.
			s.Write, s.MakeDirs = []string{"~/.amp", "/var/cache/amp"}, []string{"~/.amp", "/var/cache/amp"}
		})},
		{"codex-hosts", with(codex, func(s *backends.SandboxSpec) {
			s.Ports, s.Hosts = []uint16{8443}, []string{"*.openai.com:443", "10.0.0.0/8", "[::1]:8080", "api.openai.com"}
		})},
		{"codex-open", with(codex, func(s *backends.SandboxSpec) { s.Network, s.Ports = backends.NetworkAll, nil })},
		{"term", with(defaultSandbox(), func(s *backends.SandboxSpec) {
			s.Enabled, s.Network, s.Ports = false, backends.NetworkList, []uint16{22}
		})},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, defs[tt.id].sandbox); diff != "" {
				t.Errorf("parseDocument: sandbox of %q (-want +got):\n%s", tt.id, diff)
			}
		})
	}
}

// TestSandboxResolve: the Spec and the status carry the policy with "~/"
// expanded to Config.Home and "$WORKTREE" kept for the launcher.
func TestSandboxResolve(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp", "tool")
	f.write(t, `{"version": 1, "providers": {
  "codex": {"sandbox": {"read": ["~/models", "$WORKTREE/../shared", "/srv/data"]}},
  "tool": {"extends": "acp", "command": ["tool"],
    "sandbox": {"write": ["$WORKTREE", "$WORKTREE/.cache", "~/.tool", "~/.tool/", "/var/tmp/tool"], "network": [8443, 443], "required": true}}
}}`)
	r := open(t, f.config())
	if d := r.Snapshot().Diagnostic; d == "" {
		t.Fatalf("a read path with \"..\" was accepted; want the file rejected")
	}
	f.write(t, `{"version": 1, "providers": {
  "codex": {"sandbox": {"read": ["~/models", "/srv/data"]}},
  "tool": {"extends": "acp", "command": ["tool"],
    "sandbox": {"write": ["$WORKTREE", "$WORKTREE/.cache", "~/.tool", "~/.tool/", "/var/tmp/tool"], "sockets": ["/var/run/docker.sock", "~/.tool/agent.sock"], "network": [8443, "localhost:11434", 443, "API.Example.com:443"], "required": true}}
}}`)
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload() error = %v; want nil", err)
	}
	home := func(p string) string { return filepath.Join(f.home, p) }
	tests := []struct {
		id   string
		want backends.SandboxSpec
	}{
		{"codex", backends.SandboxSpec{Enabled: true, Network: backends.NetworkAll,
			Read:  []string{home("models"), "/srv/data"},
			Write: []string{home(".codex"), home(".cache"), home(".npm"), home("go/pkg/mod")}, MakeDirs: []string{home(".codex")}}},
		{"tool", backends.SandboxSpec{Enabled: true, Network: backends.NetworkList, Ports: []uint16{443, 8443}, Hosts: []string{"api.example.com:443", "localhost:11434"}, Required: true,
			Read:  []string{home(".gitconfig"), home(".config/git")},
			Write: []string{"$WORKTREE", "$WORKTREE/.cache", home(".tool"), "/var/tmp/tool"},
			// The user's directories are made before a launch; the
			// worktree's are there.
			MakeDirs: []string{home(".tool"), "/var/tmp/tool"},
			Sockets:  []string{"/var/run/docker.sock", home(".tool/agent.sock")}}},
	}
	snap := r.Snapshot()
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			spec, err := r.Resolve(tt.id)
			if err != nil {
				t.Fatalf("Resolve(%q) error = %v; want nil", tt.id, err)
			}
			if diff := cmp.Diff(tt.want, spec.Sandbox); diff != "" {
				t.Errorf("Resolve(%q).Sandbox (-want +got):\n%s", tt.id, diff)
			}
			p, _ := snap.Provider(tt.id)
			if diff := cmp.Diff(tt.want, p.Sandbox); diff != "" {
				t.Errorf("Snapshot().Provider(%q).Sandbox (-want +got):\n%s", tt.id, diff)
			}
			spec.Sandbox.Write[0] = "changed"
			if again, _ := r.Resolve(tt.id); again.Sandbox.Write[0] == "changed" {
				t.Errorf("Resolve(%q) shares its sandbox lists with the registry", tt.id)
			}
		})
	}

	// The API serialises the status as it is: the policy under "sandbox".
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Providers []struct {
			ID      string         `json:"id"`
			Sandbox map[string]any `json:"sandbox"`
		} `json:"providers"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	for _, p := range got.Providers {
		if p.ID != "tool" {
			continue
		}
		want := map[string]any{"enabled": true, "network": "list", "ports": []any{443.0, 8443.0}, "hosts": []any{"api.example.com:443", "localhost:11434"}, "required": true,
			"read":      []any{home(".gitconfig"), home(".config/git")},
			"write":     []any{"$WORKTREE", "$WORKTREE/.cache", home(".tool"), "/var/tmp/tool"},
			"make_dirs": []any{home(".tool"), "/var/tmp/tool"},
			"sockets":   []any{"/var/run/docker.sock", home(".tool/agent.sock")}}
		if diff := cmp.Diff(want, p.Sandbox); diff != "" {
			t.Errorf("JSON of the snapshot's tool sandbox (-want +got):\n%s", diff)
		}
	}
}

// TestSandboxChangeIsASpecChange: warm agents run an outdated policy
// after an edit of "sandbox", so subscribers hear of it as SpecChanged.
func TestSandboxChangeIsASpecChange(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	f.write(t, `{"version": 1, "providers": {"codex": {"sandbox": {"network": "all"}}}}`)
	r := open(t, f.config())
	_, ch, cancel := r.Subscribe()
	defer cancel()
	f.write(t, `{"version": 1, "providers": {"codex": {"sandbox": {"network": "none"}}}}`)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ch:
		if !equalIDs(c.SpecChanged, "codex") {
			t.Errorf("change after a sandbox edit = %+v; want codex in SpecChanged", c)
		}
	default:
		t.Fatal("no change published after a sandbox edit")
	}
}

// TestPatchSandbox edits "sandbox" with merge patches, as PATCH
// /v1/providers/{id} does: fields merge one by one, arrays replace, a null
// field goes back to the inherited value, a null sandbox to the defaults.
func TestPatchSandbox(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	f.write(t, `{"version": 1, "providers": {"codex": {"label": "Codex", "sandbox": {"read": ["/opt/a", "/opt/b"], "required": true}}}}`)
	r := open(t, f.config())
	ctx := context.Background()
	steps := []struct {
		patch string
		entry map[string]any // the codex entry in the file afterwards
		want  func(*backends.SandboxSpec)
	}{
		{`{"sandbox": {"network": [443]}}`,
			map[string]any{"label": "Codex", "sandbox": map[string]any{"read": []any{"/opt/a", "/opt/b"}, "required": true, "network": []any{443.0}}},
			func(s *backends.SandboxSpec) {
				s.Read, s.Required, s.Network, s.Ports = []string{"/opt/a", "/opt/b"}, true, backends.NetworkList, []uint16{443}
			}},
		{`{"sandbox": {"read": ["~/data"], "network": "none"}}`,
			map[string]any{"label": "Codex", "sandbox": map[string]any{"read": []any{"~/data"}, "required": true, "network": "none"}},
			func(s *backends.SandboxSpec) {
				s.Read, s.Required, s.Network = []string{filepath.Join(f.home, "data")}, true, backends.NetworkNone
			}},
		{`{"sandbox": {"read": null, "required": null}}`,
			map[string]any{"label": "Codex", "sandbox": map[string]any{"network": "none"}},
			func(s *backends.SandboxSpec) { s.Network = backends.NetworkNone }},
		{`{"sandbox": null}`,
			map[string]any{"label": "Codex"},
			func(*backends.SandboxSpec) {}},
	}
	for _, st := range steps {
		if _, err := r.Patch(ctx, "codex", []byte(st.patch), ""); err != nil {
			t.Fatalf("Patch(codex, %s) error = %v; want nil", st.patch, err)
		}
		if diff := cmp.Diff(st.entry, fileEntries(t, f.path)["codex"]); diff != "" {
			t.Errorf("codex entry after Patch(codex, %s) (-want +got):\n%s", st.patch, diff)
		}
		want := sandboxOf(f.home, "~/.codex")
		st.want(&want)
		spec, err := r.Resolve("codex")
		if err != nil {
			t.Fatalf("Resolve(codex) after Patch(codex, %s) error = %v", st.patch, err)
		}
		if diff := cmp.Diff(want, spec.Sandbox); diff != "" {
			t.Errorf("Resolve(codex).Sandbox after Patch(codex, %s) (-want +got):\n%s", st.patch, diff)
		}
	}

	bad := []struct{ patch, path string }{
		{`{"sandbox": {"write": ["relative/dir"]}}`, "providers.codex.sandbox.write[0]"},
		{`{"sandbox": {"network": [0]}}`, "providers.codex.sandbox.network[0]"},
		{`{"sandbox": {"netwrok": "none"}}`, "providers.codex.sandbox.netwrok"},
		{`{"sandbox": "off"}`, "providers.codex.sandbox"},
	}
	for _, b := range bad {
		_, err := r.Patch(ctx, "codex", []byte(b.patch), "")
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Path != b.path {
			t.Errorf("Patch(codex, %s) error = %v; want a *ValidationError at %q", b.patch, err, b.path)
		}
	}
}

func TestCheckSandboxPath(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"/opt/models", true},
		{"/", true},
		{"~/.claude", true},
		{"~/.claude.json", true},
		{"$WORKTREE", true},
		{"$WORKTREE/sub/dir", true},
		{"/a/b..c/...", true},
		{"", false},
		{"relative", false},
		{"./x", false},
		{"~", false},
		{"~/", false},
		{"~/.", false},
		{"~root/x", false},
		{"$HOME/x", false},
		{"${WORKTREE}/x", false},
		{"$WORKTREEX", false},
		{"$WORKTREE/$X", false},
		{"/opt/$X", false},
		{"/opt/../etc", false},
		{"~/../other", false},
		{"$WORKTREE/..", false},
		{"/opt/x\x00y", false},
	}
	for _, tt := range tests {
		if msg := checkSandboxPath(tt.path); (msg == "") != tt.ok {
			t.Errorf("checkSandboxPath(%q) = %q; want ok = %v", tt.path, msg, tt.ok)
		}
	}
}
