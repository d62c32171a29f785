package catalog

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// good is a valid document with one agent of each distribution kind, an
// unknown distribution kind, unknown fields and an unknown platform.
const good = `{
  "version": "1.0.0",
  "future_field": true,
  "agents": [
    {"id": "npx-agent", "name": "N", "version": "1.2.3", "description": "d", "icon": "./i.svg",
     "distribution": {"npx": {"package": "@s/n", "args": ["--acp"], "env": {"A": "1"}}}},
    {"id": "uvx-agent", "name": "U", "version": "0.1.7", "description": "d",
     "distribution": {"uvx": {"package": "minion-code@0.1.7", "args": ["acp"]}, "bunx": {"package": "x"}}},
    {"id": "bin-agent", "name": "B", "version": "2.0.0", "description": "d", "something_new": [1],
     "distribution": {"binary": {
       "linux-x86_64": {"archive": "https://example.test/b-x86.tar.gz", "cmd": "./bin/b", "args": ["acp"], "env": {"E": "x"}},
       "linux-aarch64": {"archive": "https://example.test/b-arm.zip", "cmd": "b"},
       "plan9-mips": {"archive": "https://example.test/b-plan9", "cmd": "b"}}}}
  ],
  "extensions": []
}`

func TestParseGood(t *testing.T) {
	doc, err := Parse([]byte(good))
	if err != nil {
		t.Fatalf("Parse(good) error = %v", err)
	}
	if got := len(doc.Agents); got != 3 {
		t.Fatalf("Parse(good) = %d agents; want 3", got)
	}
	if doc.Agents[2].Distribution.Binary["plan9-mips"].Cmd != "b" {
		t.Errorf("an unknown platform was dropped; want it kept (and never chosen)")
	}
}

func TestBuiltinSnapshot(t *testing.T) {
	doc := Builtin()
	byProvider := map[string]Entry{}
	for _, e := range doc.Entries("linux-x86_64") {
		byProvider[e.Provider] = e
		if e.Install == "" && e.Unavailable == "" {
			t.Errorf("entry %s has no install step", e.ID)
		}
	}
	// The entries the page offered before the registry: their commands,
	// installs and environment stay.
	want := map[string]struct {
		cmd, install string
		builtIn      bool
	}{
		"claude":   {"claude-agent-acp", "npm install -g @agentclientprotocol/claude-agent-acp", true},
		"codex":    {"codex-acp", "npm install -g @zed-industries/codex-acp", true},
		"gemini":   {"gemini --acp", "npm install -g @google/gemini-cli", true},
		"qwen":     {"qwen --acp", "npm install -g @qwen-code/qwen-code", true},
		"opencode": {"opencode acp", "npm install -g opencode-ai", true},
		"goose":    {"goose acp", "curl -fsSL https://github.com/block/goose/releases/download/stable/download_cli.sh | bash", true},
		"copilot":  {"copilot --acp", "npm install -g @github/copilot", true},
		"amp":      {"amp-acp", "npm install -g amp-acp", false},
	}
	for id, w := range want {
		e, ok := byProvider[id]
		if !ok {
			t.Errorf("the snapshot has no entry for provider %s", id)
			continue
		}
		if got := strings.Join(e.Command, " "); got != w.cmd || e.Install != w.install || e.BuiltIn != w.builtIn {
			t.Errorf("entry for %s = command %q install %q built-in %v; want %q, %q, %v", id, got, e.Install, e.BuiltIn, w.cmd, w.install, w.builtIn)
		}
	}
	if got := byProvider["gemini"].Env["GEMINI_CLI_NO_RELAUNCH"]; got != "true" {
		t.Errorf("gemini's env GEMINI_CLI_NO_RELAUNCH = %q; want true", got)
	}
	if len(byProvider) < 12 {
		t.Errorf("the snapshot has %d entries; want the registry's other agents too", len(byProvider))
	}
}

func TestEntryCommands(t *testing.T) {
	doc, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	x86 := doc.Entries("linux-x86_64")
	tests := []struct {
		name string
		got  Entry
		want Entry
	}{
		{"npx", x86[0], Entry{ID: "npx-agent", Name: "N", Version: "1.2.3", Description: "d", Provider: "npx-agent",
			Distribution: KindNPX, Command: []string{"npx", "-y", "@s/n@1.2.3", "--acp"}, Env: map[string]string{"A": "1"},
			Install: "npm install -g @s/n@1.2.3"}},
		{"uvx", x86[1], Entry{ID: "uvx-agent", Name: "U", Version: "0.1.7", Description: "d", Provider: "uvx-agent",
			Distribution: KindUVX, Command: []string{"uvx", "minion-code@0.1.7", "acp"}, Install: "uv tool install minion-code@0.1.7"}},
		{"binary tar.gz", x86[2], Entry{ID: "bin-agent", Name: "B", Version: "2.0.0", Description: "d", Provider: "bin-agent",
			Distribution: KindBinary, Command: []string{"~/.local/share/agentpool/agents/bin-agent/2.0.0/bin/b", "acp"},
			Env:     map[string]string{"E": "x"},
			Install: `mkdir -p "$HOME"/.local/share/agentpool/agents/bin-agent/2.0.0 && curl -fsSL https://example.test/b-x86.tar.gz | tar -xz -C "$HOME"/.local/share/agentpool/agents/bin-agent/2.0.0`}},
		{"binary zip", doc.Agents[2].Entry("linux-aarch64"), Entry{ID: "bin-agent", Name: "B", Version: "2.0.0", Description: "d",
			Provider: "bin-agent", Distribution: KindBinary, Command: []string{"~/.local/share/agentpool/agents/bin-agent/2.0.0/b"},
			Install: `mkdir -p "$HOME"/.local/share/agentpool/agents/bin-agent/2.0.0 && curl -fsSL -o "$HOME"/.local/share/agentpool/agents/bin-agent/2.0.0/archive.zip https://example.test/b-arm.zip && unzip -o -d "$HOME"/.local/share/agentpool/agents/bin-agent/2.0.0 "$HOME"/.local/share/agentpool/agents/bin-agent/2.0.0/archive.zip && rm "$HOME"/.local/share/agentpool/agents/bin-agent/2.0.0/archive.zip`}},
		{"no distribution for the platform", doc.Agents[2].Entry("darwin-aarch64"), Entry{ID: "bin-agent", Name: "B", Version: "2.0.0",
			Description: "d", Provider: "bin-agent", Unavailable: "B has no distribution for darwin-aarch64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.got); diff != "" {
				t.Errorf("Entry mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUVXSpecs(t *testing.T) {
	tests := []struct{ spec, cmd, install string }{
		{"pkg", "uvx pkg@1.0.0 acp", "uv tool install pkg@1.0.0"},
		{"pkg@2.0.0", "uvx pkg@2.0.0 acp", "uv tool install pkg@2.0.0"},
		{"pkg==2.0.0", "uvx pkg@2.0.0 acp", "uv tool install pkg@2.0.0"},
		{"pkg[extra]==2.0.0", "uvx --from pkg[extra]==2.0.0 pkg acp", "uv tool install 'pkg[extra]==2.0.0'"},
		{"pkg>=2", "uvx --from pkg>=2 pkg acp", "uv tool install 'pkg>=2'"},
	}
	for _, tt := range tests {
		cmd, install := uvxCommand(tt.spec, "1.0.0", []string{"acp"})
		if got := strings.Join(cmd, " "); got != tt.cmd || install != tt.install {
			t.Errorf("uvxCommand(%q) = %q, %q; want %q, %q", tt.spec, got, install, tt.cmd, tt.install)
		}
	}
}

func TestParseBad(t *testing.T) {
	agent := func(fields string) string {
		return `{"version": "1.0.0", "agents": [{` + fields + `}]}`
	}
	const base = `"name": "N", "version": "1.0.0", "description": "d"`
	const dist = `"distribution": {"npx": {"package": "p"}}`
	tests := []struct{ name, doc, path string }{
		{"not json", `{"version": `, ""},
		{"trailing data", `{"version": "1.0.0", "agents": []} {}`, ""},
		{"no version", `{"agents": []}`, "version"},
		{"bad version", `{"version": "one", "agents": []}`, "version"},
		{"no agents", `{"version": "1.0.0"}`, "agents"},
		{"agent not an object", `{"version": "1.0.0", "agents": [3]}`, "agents[0]"},
		{"no id", agent(base + `, ` + dist), "agents[0].id"},
		{"bad id", agent(`"id": "Bad_Id", ` + base + `, ` + dist), "agents[0].id"},
		{"id too long", agent(`"id": "` + strings.Repeat("a", 200) + `", ` + base + `, ` + dist), "agents[0].id"},
		{"reserved id", agent(`"id": "acp", ` + base + `, ` + dist), "agents[0].id"},
		{"id not a string", agent(`"id": 7, ` + base + `, ` + dist), "agents[0].id"},
		{"no name", agent(`"id": "a", "version": "1.0.0", "description": "d", ` + dist), "agents[0].name"},
		{"no version of agent", agent(`"id": "a", "name": "N", "description": "d", ` + dist), "agents[0].version"},
		{"bad version of agent", agent(`"id": "a", "name": "N", "version": "latest", "description": "d", ` + dist), "agents[0].version"},
		{"version with a path", agent(`"id": "a", "name": "N", "version": "1.0.0/../../../bin", "description": "d", ` + dist), "agents[0].version"},
		{"version with a shell word", agent(`"id": "a", "name": "N", "version": "1.0.0 $(id)", "description": "d", ` + dist), "agents[0].version"},
		{"no description", agent(`"id": "a", "name": "N", "version": "1.0.0", ` + dist), "agents[0].description"},
		{"no distribution", agent(`"id": "a", ` + base), "agents[0].distribution"},
		{"empty distribution", agent(`"id": "a", ` + base + `, "distribution": {}`), "agents[0].distribution"},
		{"no package", agent(`"id": "a", ` + base + `, "distribution": {"npx": {"args": []}}`), "agents[0].distribution.npx.package"},
		{"package with a shell word", agent(`"id": "a", ` + base + `, "distribution": {"uvx": {"package": "p; rm -rf ~"}}`), "agents[0].distribution.uvx.package"},
		{"args not strings", agent(`"id": "a", ` + base + `, "distribution": {"npx": {"package": "p", "args": [1]}}`), "agents[0].distribution.npx.args"},
		{"bad env name", agent(`"id": "a", ` + base + `, "distribution": {"npx": {"package": "p", "env": {"A B": "1"}}}`), "agents[0].distribution.npx.env.A B"},
		{"binary without platforms", agent(`"id": "a", ` + base + `, "distribution": {"binary": {}}`), "agents[0].distribution.binary"},
		{"binary without archive", agent(`"id": "a", ` + base + `, "distribution": {"binary": {"linux-x86_64": {"cmd": "a"}}}`), "agents[0].distribution.binary.linux-x86_64.archive"},
		{"binary archive not http", agent(`"id": "a", ` + base + `, "distribution": {"binary": {"linux-x86_64": {"archive": "file:///etc/passwd", "cmd": "a"}}}`), "agents[0].distribution.binary.linux-x86_64.archive"},
		{"binary without cmd", agent(`"id": "a", ` + base + `, "distribution": {"binary": {"linux-x86_64": {"archive": "https://x.test/a.tgz"}}}`), "agents[0].distribution.binary.linux-x86_64.cmd"},
		{"binary cmd escapes", agent(`"id": "a", ` + base + `, "distribution": {"binary": {"linux-x86_64": {"archive": "https://x.test/a.tgz", "cmd": "../../bin/sh"}}}`), "agents[0].distribution.binary.linux-x86_64.cmd"},
		{"duplicate id", `{"version": "1.0.0", "agents": [{"id": "a", ` + base + `, ` + dist + `}, {"id": "a", ` + base + `, ` + dist + `}]}`, "agents[1].id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse() error = %v; want ErrInvalid", err)
			}
			fes := FieldErrors(err)
			if len(fes) == 0 || fes[0].Path != tt.path {
				t.Errorf("Parse() error = %v; want the first problem at %q", err, tt.path)
			}
		})
	}
}

func TestStorePut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.json")
	s := Open(Config{Path: path, Platform: "linux-x86_64"})
	if v := s.View(); v.Source != SourceBuiltin || len(v.Agents) < 12 {
		t.Fatalf("View() = %s with %d agents; want the built-in snapshot", v.Source, len(v.Agents))
	}
	v, err := s.Put([]byte(good))
	if err != nil {
		t.Fatalf("Put(good) error = %v", err)
	}
	if v.Source != SourceFile || v.File != path || len(v.Agents) != 3 {
		t.Fatalf("Put(good) = %s %q with %d agents; want file %q with 3", v.Source, v.File, len(v.Agents), path)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stored catalog: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	// A bad document is refused whole; the catalog and the file stay.
	if _, err := s.Put([]byte(`{"version": "1.0.0", "agents": [{"id": "x"}]}`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Put(bad) error = %v; want ErrInvalid", err)
	}
	if v := s.View(); len(v.Agents) != 3 {
		t.Errorf("after a refused Put, View() has %d agents; want the previous 3", len(v.Agents))
	}
	if data, _ := os.ReadFile(path); string(data) != good {
		t.Errorf("a refused Put changed the stored file")
	}
	// A new Store reads the stored document.
	if v := Open(Config{Path: path, Platform: "linux-x86_64"}).View(); v.Source != SourceFile || len(v.Agents) != 3 {
		t.Errorf("Open() of the stored catalog = %s with %d agents; want file with 3", v.Source, len(v.Agents))
	}
	// A stored document that became invalid is ignored, not fatal.
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v := Open(Config{Path: path, Logger: slog.New(slog.DiscardHandler)}).View(); v.Source != SourceBuiltin {
		t.Errorf("Open() of a broken stored catalog = %s; want the built-in one", v.Source)
	}
}

// TestEntryRefusesUnsafeEnv: a catalog entry whose environment would make
// the agent's program run other code or trust other servers is not
// offered, and says which variable.
func TestEntryRefusesUnsafeEnv(t *testing.T) {
	for _, k := range []string{"LD_PRELOAD", "NODE_OPTIONS", "BROWSER", "https_proxy", "GIT_SSH_COMMAND", "SSL_CERT_FILE"} {
		a := Agent{ID: "evil", Name: "Evil", Version: "1.0.0",
			Distribution: Distribution{NPX: &Package{Package: "evil-agent", Env: map[string]string{"SAFE_FLAG": "1", k: "x"}}}}
		e := a.Entry("linux-x86_64")
		if !strings.Contains(e.Unavailable, k) {
			t.Errorf("entry with %s: Unavailable = %q; want it refused, named", k, e.Unavailable)
		}
	}
	ok := Agent{ID: "fine", Name: "Fine", Version: "1.0.0",
		Distribution: Distribution{NPX: &Package{Package: "fine-agent", Env: map[string]string{"FINE_DISABLE_AUTO_UPDATE": "1"}}}}
	if e := ok.Entry("linux-x86_64"); e.Unavailable != "" {
		t.Errorf("entry with a harmless variable: Unavailable = %q", e.Unavailable)
	}
}
