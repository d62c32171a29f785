package registry

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

// A providers file deleted while the registry runs must not silently turn
// the user's choices back into the built-ins' defaults.
func TestRemovedFileKeepsTheLastGoodConfig(t *testing.T) {
	f := newFixture(t)
	f.install(t, "gemini", "codex-acp")
	r := open(t, f.config())
	if s := r.Snapshot(); status(s, "gemini") != StatusReady || s.Diagnostic != "" {
		t.Fatalf("at start without a file: gemini %s, diagnostic %q; want the built-ins, ready, no diagnostic", status(s, "gemini"), s.Diagnostic)
	}
	f.write(t, geminiOff)
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload() error = %v", err)
	}
	if err := os.Remove(f.path); err != nil {
		t.Fatal(err)
	}
	err := r.Reload()
	s := r.Snapshot()
	if err == nil || !strings.Contains(err.Error(), "is missing") || !strings.Contains(s.Diagnostic, f.path+" is missing") {
		t.Errorf("Reload() of a deleted file error = %v, diagnostic %q; want both to say %s is missing", err, s.Diagnostic, f.path)
	}
	if status(s, "gemini") != StatusDisabled {
		t.Errorf("gemini is %s after the file was deleted; want it to stay disabled", status(s, "gemini"))
	}
	if _, err := r.Resolve("gemini"); !errors.Is(err, ErrDisabled) {
		t.Errorf("Resolve(gemini) error = %v; want ErrDisabled", err)
	}

	// A patch applies to the config in force, so it brings the file back
	// with the user's earlier choices in it.
	if _, err := r.Patch(context.Background(), "codex", []byte(`{"enabled": false}`), ""); err != nil {
		t.Fatalf("Patch(codex) with the file missing error = %v", err)
	}
	s = r.Snapshot()
	if status(s, "gemini") != StatusDisabled || status(s, "codex") != StatusDisabled || s.Diagnostic != "" {
		t.Errorf("after the patch: gemini %s, codex %s, diagnostic %q; want both disabled and no diagnostic",
			status(s, "gemini"), status(s, "codex"), s.Diagnostic)
	}

	// An empty document is how to go back to the built-ins.
	f.write(t, `{"version": 1, "providers": {}}`)
	if err := r.Reload(); err != nil || status(r.Snapshot(), "gemini") != StatusReady {
		t.Errorf("after an empty document: Reload() = %v, gemini %s; want nil, ready", err, status(r.Snapshot(), "gemini"))
	}
}

// A providers.json replaced by a directory is reported, blocks patches with
// ErrConfig (not an internal error), and the watcher keeps going.
func TestFileReplacedByADirectory(t *testing.T) {
	f := newFixture(t)
	f.install(t, "gemini")
	f.write(t, geminiOff)
	r := open(t, f.config())
	_, ch, cancel := r.Subscribe()
	defer cancel()
	run(t, r)
	if err := os.Remove(f.path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.path, 0o755); err != nil {
		t.Fatal(err)
	}
	s := waitUntil(t, r, ch, "a diagnostic about the directory", func(s Snapshot) bool {
		return strings.Contains(s.Diagnostic, "directory")
	})
	if status(s, "gemini") != StatusDisabled {
		t.Errorf("gemini is %s with a directory in place of the file; want the last good config (disabled)", status(s, "gemini"))
	}
	_, err := r.Patch(context.Background(), "gemini", []byte(`{"enabled": true}`), "")
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "directory") {
		t.Errorf("Patch with a directory in place of the file error = %v; want ErrConfig saying it is a directory", err)
	}
	if err := os.Remove(f.path); err != nil {
		t.Fatal(err)
	}
	f.write(t, geminiOn)
	waitUntil(t, r, ch, "the file written again", geminiIs(StatusReady))
}

func TestPatchUnknownProvider(t *testing.T) {
	f := newFixture(t)
	f.write(t, `{"version": 1, "providers": {"amp": {"extends": "acp", "command": ["amp-acp"]}}}`)
	r := open(t, f.config())
	for _, tt := range []struct {
		id, patch string
		want      []string
	}{
		{"gemni", `{"enabled": false}`, []string{`unknown provider "gemni"`, `did you mean "gemini"?`, "known: aider, amp, claude"}},
		{"ampp", `{"enabled": true}`, []string{`did you mean "amp"?`}},
		{"zzz", `null`, []string{`unknown provider "zzz"`, `a new provider needs "extends"`}},
	} {
		_, err := r.Patch(context.Background(), tt.id, []byte(tt.patch), "")
		if !errors.Is(err, ErrUnknown) {
			t.Errorf("Patch(%q, %s) error = %v; want ErrUnknown", tt.id, tt.patch, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Patch(%q, %s) error = %q; want it to contain %q", tt.id, tt.patch, err, w)
			}
		}
	}
	if data, _ := os.ReadFile(f.path); strings.Contains(string(data), "gemni") {
		t.Errorf("a patch of an unknown provider changed the file:\n%s", data)
	}
	// Defining a new provider is still a patch away.
	if _, err := r.Patch(context.Background(), "bob", []byte(`{"extends": "acp", "command": ["bob-acp"]}`), ""); err != nil {
		t.Errorf("Patch defining a new provider error = %v", err)
	}
	if _, err := r.Patch(context.Background(), "amp", []byte(`{"enabled": false}`), ""); err != nil {
		t.Errorf("Patch of a provider defined in the file error = %v", err)
	}
}

func TestResolveMessages(t *testing.T) {
	f := newFixture(t)
	f.write(t, geminiOff)
	r := open(t, f.config())
	for _, tt := range []struct {
		id   string
		want error
		msg  string
	}{
		{"gemni", ErrUnknown, `unknown provider "gemni", did you mean "gemini"? (known: aider, claude`},
		{"gemini", ErrDisabled, `provider "gemini" is disabled in ` + f.path + ` (enable it with: agentpool providers enable gemini`},
		{"claude", ErrNotInstalled, `provider "claude" is not installed: command "claude-agent-acp" not found in PATH (PATH=` + f.bin + `)`},
	} {
		_, err := r.Resolve(tt.id)
		if !errors.Is(err, tt.want) || !strings.HasPrefix(err.Error(), tt.msg) {
			t.Errorf("Resolve(%q) error = %v; want %v starting with %q", tt.id, err, tt.want, tt.msg)
		}
	}
}

// The PATH searched is said once, in the snapshot, not in the diagnostic
// of every provider that is not installed.
func TestSnapshotSaysThePATHOnce(t *testing.T) {
	f := newFixture(t)
	r := open(t, f.config())
	s := r.Snapshot()
	if s.PathEnv != f.bin {
		t.Errorf("Snapshot().PathEnv = %q; want %q", s.PathEnv, f.bin)
	}
	p, _ := s.Provider("claude")
	if p.Status != StatusNotInstalled || p.Diagnostic != `command "claude-agent-acp" not found in PATH` {
		t.Errorf("claude = %s, %q; want not_installed, `command \"claude-agent-acp\" not found in PATH`", p.Status, p.Diagnostic)
	}
}
