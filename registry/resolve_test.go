package registry

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/google/go-cmp/cmp"
)

func TestResolveSpecs(t *testing.T) {
	f := newFixture(t)
	f.install(t, "claude-agent-acp", "gemini", "aider", "amp-acp", "tool")
	if err := os.MkdirAll(filepath.Join(f.dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(f.dir, "bin", "local-agent")
	if err := os.WriteFile(local, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.write(t, `{
  "version": 1,
  "providers": {
    "claude": {"permissions": {"edit": "ask", "read": "allow"}, "turn_timeout": "45m", "idle_timeout": "5m", "mode": "default"},
    "gemini": {"env": {"HTTPS_PROXY": "http://127.0.0.1:3128", "A_FIRST": "1"}},
    "claude-root": {"extends": "claude", "env": {"IS_SANDBOX": "1"}, "permissions": {"execute": "deny"}, "mode": "full"},
    "claude-root2": {"extends": "claude-root", "label": "Second"},
    "amp": {"extends": "acp", "command": ["amp-acp", "--flag", "x y"]},
    "local": {"extends": "acp", "command": ["./bin/local-agent"]},
    "aider": {"ready_pattern": "^> $", "busy_pattern": "(?i)working", "quiet_window": "800ms", "cols": 100, "rows": 30, "cancel_keys": "\u001b"},
    "term": {"extends": "pty", "command": ["tool"], "resume_args": ["--resume"]}
  }
}`)
	r := open(t, f.config())
	bin := func(n string) string { return filepath.Join(f.bin, n) }
	claude := backends.Spec{Provider: "claude", Kind: backends.KindACP, Path: bin("claude-agent-acp"),
		TurnTimeout: 45 * time.Minute, IdleTimeout: 5 * time.Minute,
		Permissions: map[string]string{"edit": "ask", "read": "allow"}, Compat: backends.Compat{NoCancelRequest: true},
		Sandbox: sandboxOf(f.home, "~/.claude", "~/.claude.json", "~/.cache/claude-cli-nodejs"), PassEnv: builtinPassEnv(ProviderClaude)}
	root := claude
	root.Provider, root.Env, root.Mode = "claude-root", []string{"IS_SANDBOX=1"}, "full"
	root.Permissions = map[string]string{"edit": "ask", "read": "allow", "execute": "deny"}
	root2 := root
	root2.Provider = "claude-root2"
	tests := []struct {
		id   string
		want backends.Spec
	}{
		{"claude", claude},
		{"claude-root", root},
		{"claude-root2", root2},
		{"gemini", backends.Spec{Provider: "gemini", Kind: backends.KindACP, Path: bin("gemini"), Args: []string{"--acp"},
			Env:     []string{"A_FIRST=1", "GEMINI_CLI_NO_RELAUNCH=true", "HTTPS_PROXY=http://127.0.0.1:3128"},
			Compat:  backends.Compat{MissingFileEmpty: true},
			Sandbox: sandboxOf(f.home, "~/.gemini"), PassEnv: builtinPassEnv(ProviderGemini)}},
		{"amp", backends.Spec{Provider: "amp", Kind: backends.KindACP, Path: bin("amp-acp"), Args: []string{"--flag", "x y"},
			Sandbox: sandboxOf(f.home)}},
		{"local", backends.Spec{Provider: "local", Kind: backends.KindACP, Path: local, Sandbox: sandboxOf(f.home)}},
		{"demo", backends.Spec{Provider: "demo", Kind: backends.KindACP, Path: f.config().SelfPath, Args: []string{DemoAgentArg},
			Sandbox: sandboxOf(f.home)}},
		{"aider", backends.Spec{Provider: "aider", Kind: backends.KindPTY, Path: bin("aider"),
			PTY: backends.PTYSpec{ReadyPattern: "^> $", BusyPattern: "(?i)working", QuietWindow: 800 * time.Millisecond, Cols: 100, Rows: 30, CancelKeys: "\x1b",
				ResumeArgs:        []string{"--restore-chat-history"}, // resume_args, cancel_min_interval, ignore_patterns from the built-in
				CancelMinInterval: 2 * time.Second, IgnorePatterns: aiderIgnorePatterns},
			Sandbox: sandboxOf(f.home, "~/.aider"), PassEnv: builtinPassEnv(ProviderAider)}},
		{"term", backends.Spec{Provider: "term", Kind: backends.KindPTY, Path: bin("tool"),
			PTY: backends.PTYSpec{ResumeArgs: []string{"--resume"}}, Sandbox: sandboxOf(f.home)}},
	}
	// The demo agent's binary is the daemon itself; here a fake.
	f.install(t, "agentpool")
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload() error = %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			got, err := r.Resolve(tt.id)
			if err != nil {
				t.Fatalf("Resolve(%q) error = %v; want nil", tt.id, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Resolve(%q) mismatch (-want +got):\n%s", tt.id, diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Resolve(%q).Validate() = %v", tt.id, err)
			}
		})
	}
	s := r.Snapshot()
	if p, _ := s.Provider("claude-root2"); p.Label != "Second" || p.BuiltIn || !p.Enabled {
		t.Errorf("claude-root2 status = %+v; want label Second, not built in, enabled", p)
	}
	if p, _ := s.Provider("claude-root"); p.Label != "claude-root" || p.Description != "" {
		t.Errorf("claude-root status = %+v; want label = id and no inherited description", p)
	}
}

func TestResolveErrors(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	if err := os.WriteFile(filepath.Join(f.bin, "qwen"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.bin, "goose"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.write(t, `{"version": 1, "providers": {"codex": {"enabled": false}, "abs": {"extends": "acp", "command": ["/nonexistent/agent"]}}}`)
	r := open(t, f.config())
	tests := []struct {
		id       string
		want     error
		contains []string
		status   string
	}{
		{"nope", ErrUnknown, []string{`"nope"`, "known: abs, aider, claude"}, "absent"},
		{"codex", ErrDisabled, []string{f.path, `"enabled": true`}, StatusDisabled},
		{"claude", ErrNotInstalled, []string{`"claude-agent-acp" not found`, "PATH=" + f.bin}, StatusNotInstalled},
		{"qwen", ErrConfig, []string{"not executable"}, StatusError},
		{"goose", ErrConfig, []string{"is a directory"}, StatusError},
		{"abs", ErrNotInstalled, []string{"/nonexistent/agent does not exist"}, StatusNotInstalled},
	}
	s := r.Snapshot()
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			_, err := r.Resolve(tt.id)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Resolve(%q) error = %v; want %v", tt.id, err, tt.want)
			}
			for _, c := range tt.contains {
				if !strings.Contains(err.Error(), c) {
					t.Errorf("Resolve(%q) error = %q; want it to contain %q", tt.id, err, c)
				}
			}
			if got := status(s, tt.id); got != tt.status {
				t.Errorf("status of %q = %q; want %q", tt.id, got, tt.status)
			}
			if p, ok := s.Provider(tt.id); ok && tt.status != StatusDisabled && p.Diagnostic == "" {
				t.Errorf("status of %q has no diagnostic", tt.id)
			}
		})
	}
}

func TestResolveUnknownWhileFileIsBad(t *testing.T) {
	f := newFixture(t)
	f.write(t, `{"version": 1, "providers": {"amp": {"extends": "acp", "command": ["amp-acp"], "bad": 1}}}`)
	r := open(t, f.config())
	_, err := r.Resolve("amp")
	if !errors.Is(err, ErrUnknown) || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "has errors") {
		t.Errorf("Resolve(amp) error = %v; want ErrUnknown and ErrConfig naming the bad file", err)
	}
	if s := r.Snapshot(); !strings.Contains(s.Diagnostic, "providers.amp.bad") || status(s, "demo") == "absent" {
		t.Errorf("snapshot of a bad file at start = %q, demo %q; want the diagnostic and the built-ins",
			s.Diagnostic, status(s, "demo"))
	}
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "providers.amp.bad") {
		t.Errorf("Reload() error = %v; want the diagnostic", err)
	}
}

func TestResolveFindsANewInstall(t *testing.T) {
	f := newFixture(t)
	r := open(t, f.config())
	_, ch, cancel := r.Subscribe()
	defer cancel()
	if _, err := r.Resolve("codex"); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Resolve(codex) before install error = %v; want ErrNotInstalled", err)
	}
	f.install(t, "codex-acp")
	spec, err := r.Resolve("codex")
	if err != nil || spec.Path != filepath.Join(f.bin, "codex-acp") {
		t.Fatalf("Resolve(codex) after install = %+v, %v; want the new path", spec, err)
	}
	if got := status(r.Snapshot(), "codex"); got != StatusReady {
		t.Errorf("status of codex after install = %q; want ready", got)
	}
	select {
	case c := <-ch:
		if !equalIDs(c.SpecChanged, "codex") {
			t.Errorf("change after install = %+v; want codex in SpecChanged", c)
		}
	default:
		t.Error("no change published after install")
	}
}

func equalIDs(list []string, want ...string) bool {
	return strings.Join(list, ",") == strings.Join(want, ",")
}

func TestResolveReturnsACopy(t *testing.T) {
	f := newFixture(t)
	f.install(t, "gemini")
	f.write(t, `{"version": 1, "providers": {"gemini": {"permissions": {"edit": "ask"}}}}`)
	r := open(t, f.config())
	a, err := r.Resolve("gemini")
	if err != nil {
		t.Fatal(err)
	}
	a.Args[0], a.Env[0], a.Permissions["edit"] = "changed", "changed", "allow"
	b, _ := r.Resolve("gemini")
	if b.Args[0] != "--acp" || b.Env[0] != "GEMINI_CLI_NO_RELAUNCH=true" || b.Permissions["edit"] != "ask" {
		t.Errorf("Resolve(gemini) after changing a previous result = %+v; want the original", b)
	}
}

func TestLookPath(t *testing.T) {
	f := newFixture(t)
	f.install(t, "tool")
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "tool"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(other, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, cmd, pathEnv string
		status, path       string
	}{
		{"in PATH", "tool", f.bin, StatusReady, filepath.Join(f.bin, "tool")},
		{"first executable wins", "tool", other + ":" + f.bin, StatusReady, filepath.Join(f.bin, "tool")},
		{"relative PATH entries skipped", "tool", "bin:.:" + other, StatusError, ""},
		{"file as PATH entry", "tool", notDir + ":" + f.bin, StatusReady, filepath.Join(f.bin, "tool")},
		{"absent", "nope", f.bin, StatusNotInstalled, ""},
		{"absolute", filepath.Join(f.bin, "tool"), "", StatusReady, filepath.Join(f.bin, "tool")},
		{"relative to the file", "./tool", "", StatusReady, filepath.Join(f.bin, "tool")},
		{"relative parent", "../bin/tool", "", StatusReady, filepath.Join(f.bin, "tool")},
		{"home", "~/../bin/tool", "", StatusReady, filepath.Join(f.bin, "tool")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := lookPath(tt.cmd, tt.pathEnv, f.bin, f.home)
			if got.status != tt.status || got.path != tt.path {
				t.Errorf("lookPath(%q, %q) = %+v; want status %s, path %q", tt.cmd, tt.pathEnv, got, tt.status, tt.path)
			}
		})
	}
}

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"relative self", Config{SelfPath: "agentpool"}},
		{"negative debounce", Config{Debounce: -1}},
		{"negative poll", Config{PollInterval: -1}},
		{"negative probe timeout", Config{ProbeTimeout: -1}},
		{"negative concurrency", Config{ProbeConcurrency: -1}},
		{"relative home", Config{Home: "home"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r, err := New(tt.cfg); err == nil {
				_ = r.Close()
				t.Errorf("New(%+v) error = nil; want an error", tt.cfg)
			}
		})
	}
	r, err := New(Config{})
	if err != nil {
		t.Fatalf("New(Config{}) error = %v", err)
	}
	defer r.Close()
	self, _ := os.Executable()
	if spec, err := r.Resolve(ProviderDemo); err != nil || spec.Path != self {
		t.Errorf("Resolve(demo) with defaults = %+v, %v; want path %q", spec, err, self)
	}
	if s := r.Snapshot(); s.File != "" || s.ETag != `"absent"` || len(s.Providers) != 10 {
		t.Errorf("snapshot without a file = file %q, etag %s, %d providers; want none, absent, 10", s.File, s.ETag, len(s.Providers))
	}
}

// sandboxOf is the default sandbox of a provider with the given state
// directories, resolved under home.
func sandboxOf(home string, stateDirs ...string) backends.SandboxSpec {
	expand := func(paths []string) []string {
		out := make([]string, len(paths))
		for i, p := range paths {
			out[i] = filepath.Join(home, strings.TrimPrefix(p, "~/"))
		}
		return out
	}
	var mk []string
	for _, p := range stateDirs {
		if p != "~/.claude.json" {
			mk = append(mk, p)
		}
	}
	s := backends.SandboxSpec{Enabled: true, Network: backends.NetworkAll, Read: expand(CommonReadable()),
		Write: expand(append(stateDirs, CommonWritable()...))}
	if len(mk) > 0 {
		s.MakeDirs = expand(mk)
	}
	return s
}
