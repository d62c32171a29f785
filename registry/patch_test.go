package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fileEntries returns the providers map of the file at path.
func fileEntries(t *testing.T, path string) map[string]map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Version   int                       `json:"version"`
		Providers map[string]map[string]any `json:"providers"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("written file is not JSON: %v\n%s", err, data)
	}
	if doc.Version != FileVersion {
		t.Fatalf("written file has version %d", doc.Version)
	}
	return doc.Providers
}

const patchBase = `{
  "$schema": "./providers.schema.json",
  "version": 1,
  "providers": {
    "codex": {"command": ["/opt/codex/codex-acp", "--profile", "work"], "env": {"CODEX_HOME": "/srv/codex"}, "label": "Codex (work)"},
    "aider": {"ready_pattern": "^> $"}
  }
}
`

func TestPatchMergeSemantics(t *testing.T) {
	tests := []struct {
		name  string
		id    string
		patch string
		want  map[string]map[string]any
	}{
		{"one field changes, the rest stay", "codex", `{"enabled": false}`, map[string]map[string]any{
			"codex": {"command": []any{"/opt/codex/codex-acp", "--profile", "work"}, "env": map[string]any{"CODEX_HOME": "/srv/codex"},
				"label": "Codex (work)", "enabled": false},
			"aider": {"ready_pattern": "^> $"}}},
		{"nested maps merge", "codex", `{"env": {"EXTRA": "1"}}`, map[string]map[string]any{
			"codex": {"command": []any{"/opt/codex/codex-acp", "--profile", "work"}, "env": map[string]any{"CODEX_HOME": "/srv/codex", "EXTRA": "1"},
				"label": "Codex (work)"},
			"aider": {"ready_pattern": "^> $"}}},
		{"null removes a field", "codex", `{"label": null, "env": {"CODEX_HOME": null}}`, map[string]map[string]any{
			"codex": {"command": []any{"/opt/codex/codex-acp", "--profile", "work"}, "env": map[string]any{}},
			"aider": {"ready_pattern": "^> $"}}},
		{"arrays replace", "codex", `{"command": ["codex-acp"]}`, map[string]map[string]any{
			"codex": {"command": []any{"codex-acp"}, "env": map[string]any{"CODEX_HOME": "/srv/codex"}, "label": "Codex (work)"},
			"aider": {"ready_pattern": "^> $"}}},
		{"pass_env replaces", "codex", `{"pass_env": ["OPENAI_API_KEY", "AZURE_OPENAI_*"]}`, map[string]map[string]any{
			"codex": {"command": []any{"/opt/codex/codex-acp", "--profile", "work"}, "env": map[string]any{"CODEX_HOME": "/srv/codex"},
				"label": "Codex (work)", "pass_env": []any{"OPENAI_API_KEY", "AZURE_OPENAI_*"}},
			"aider": {"ready_pattern": "^> $"}}},
		{"null removes the entry", "codex", `null`, map[string]map[string]any{
			"aider": {"ready_pattern": "^> $"}}},
		{"new entry", "amp", `{"extends": "acp", "command": ["amp-acp"]}`, map[string]map[string]any{
			"codex": {"command": []any{"/opt/codex/codex-acp", "--profile", "work"}, "env": map[string]any{"CODEX_HOME": "/srv/codex"}, "label": "Codex (work)"},
			"aider": {"ready_pattern": "^> $"},
			"amp":   {"extends": "acp", "command": []any{"amp-acp"}}}},
		{"override of a built-in without an entry", "gemini", `{"enabled": false}`, map[string]map[string]any{
			"codex":  {"command": []any{"/opt/codex/codex-acp", "--profile", "work"}, "env": map[string]any{"CODEX_HOME": "/srv/codex"}, "label": "Codex (work)"},
			"aider":  {"ready_pattern": "^> $"},
			"gemini": {"enabled": false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.write(t, patchBase)
			if err := os.Chmod(f.path, 0o640); err != nil {
				t.Fatal(err)
			}
			r := open(t, f.config())
			etag, err := r.Patch(context.Background(), tt.id, []byte(tt.patch), r.Snapshot().ETag)
			if err != nil {
				t.Fatalf("Patch(%q, %s) error = %v", tt.id, tt.patch, err)
			}
			if diff := cmp.Diff(tt.want, fileEntries(t, f.path)); diff != "" {
				t.Errorf("file after Patch(%q, %s) (-want +got):\n%s", tt.id, tt.patch, diff)
			}
			data, _ := os.ReadFile(f.path)
			if s := r.Snapshot(); s.ETag != etag || etag != ETagOf(data) || s.Diagnostic != "" {
				t.Errorf("after Patch: snapshot etag %s, returned %s, file %s, diagnostic %q; want all equal, none",
					s.ETag, etag, ETagOf(data), s.Diagnostic)
			}
			if fi, _ := os.Stat(f.path); fi.Mode().Perm() != 0o640 {
				t.Errorf("file mode after Patch = %v; want 0640 kept", fi.Mode().Perm())
			}
			if !strings.Contains(string(data), `"^> $"`) || !strings.Contains(string(data), `"$schema"`) {
				t.Errorf("Patch mangled other content:\n%s", data)
			}
			// Applied at once, without Run.
			if tt.id == "gemini" && status(r.Snapshot(), "gemini") != StatusDisabled {
				t.Errorf("gemini after Patch is %s; want disabled at once", status(r.Snapshot(), "gemini"))
			}
		})
	}
}

func TestPatchConflict(t *testing.T) {
	f := newFixture(t)
	f.write(t, patchBase)
	r := open(t, f.config())
	stale := r.Snapshot().ETag
	handEdit := strings.Replace(patchBase, "Codex (work)", "Codex (edited by hand)", 1)
	f.write(t, handEdit) // not reloaded: no Run

	for _, ifMatch := range []string{stale, "W/" + stale, strings.Trim(stale, `"`)} {
		_, err := r.Patch(context.Background(), "codex", []byte(`{"enabled": false}`), ifMatch)
		if !errors.Is(err, ErrPreconditionFailed) {
			t.Errorf("Patch with stale If-Match %s error = %v; want ErrPreconditionFailed", ifMatch, err)
		}
	}
	if data, _ := os.ReadFile(f.path); string(data) != handEdit {
		t.Fatalf("a conflicting Patch changed the file:\n%s", data)
	}
	current := ETagOf([]byte(handEdit))
	forms := []func(string) string{
		func(e string) string { return e },
		func(e string) string { return "W/" + e },
		func(e string) string { return strings.Trim(e, `"`) },
		func(string) string { return "*" },
		func(string) string { return "" },
	}
	for i, form := range forms {
		ifMatch := form(current)
		patch := fmt.Sprintf(`{"turn_timeout": "%dm"}`, i+1)
		etag, err := r.Patch(context.Background(), "codex", []byte(patch), ifMatch)
		if err != nil {
			t.Errorf("Patch with If-Match %s error = %v; want nil", ifMatch, err)
		}
		current = etag
	}
	if e := fileEntries(t, f.path)["codex"]; e["label"] != "Codex (edited by hand)" || e["turn_timeout"] != "5m" {
		t.Errorf("codex entry = %v; want the hand edit kept and the patch applied", e)
	}
}

func TestPatchRejectsInvalidResult(t *testing.T) {
	tests := []struct {
		name, id, patch string
		path            string // of the *ValidationError
	}{
		{"wrong type", "codex", `{"enabled": "no"}`, "providers.codex.enabled"},
		{"unknown field", "codex", `{"enabeld": false}`, "providers.codex.enabeld"},
		{"new without extends", "amp", `{"command": ["amp-acp"]}`, "providers.amp"},
		{"not an object", "codex", `"off"`, "providers.codex"},
		{"pty field on acp", "codex", `{"cols": 100}`, "providers.codex.cols"},
		{"pass_env of the daemon's token", "codex", `{"pass_env": ["OPENAI_API_KEY", "AGENTPOOL_TOKEN"]}`, "providers.codex.pass_env[1]"},
		{"bad id", "Bad Id", `{}`, `providers["Bad Id"]`},
		{"patch not JSON", "codex", `{"enabled": fal`, ""},
		{"patch with trailing data", "codex", `{} {}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.write(t, patchBase)
			r := open(t, f.config())
			before := r.Snapshot()
			_, err := r.Patch(context.Background(), tt.id, []byte(tt.patch), "")
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Path != tt.path {
				t.Fatalf("Patch(%q, %s) error = %v; want a *ValidationError at %q", tt.id, tt.patch, err, tt.path)
			}
			if data, _ := os.ReadFile(f.path); string(data) != patchBase {
				t.Errorf("a rejected Patch changed the file:\n%s", data)
			}
			if entries, _ := os.ReadDir(f.dir); len(entries) != 1 {
				t.Errorf("a rejected Patch left files behind: %v", entries)
			}
			if after := r.Snapshot(); after.Version != before.Version {
				t.Errorf("a rejected Patch moved the snapshot from %d to %d", before.Version, after.Version)
			}
		})
	}
}

func TestPatchCreatesTheFile(t *testing.T) {
	f := newFixture(t)
	f.install(t, "gemini")
	r := open(t, f.config())
	if _, err := r.Patch(context.Background(), "gemini", []byte(`{"enabled": false}`), "*"); !errors.Is(err, ErrPreconditionFailed) {
		t.Errorf(`Patch with If-Match "*" and no file error = %v; want ErrPreconditionFailed`, err)
	}
	etag, err := r.Patch(context.Background(), "gemini", []byte(`{"enabled": false}`), `"absent"`)
	if err != nil {
		t.Fatalf("Patch on a missing file error = %v", err)
	}
	if fi, err := os.Stat(f.path); err != nil || fi.Mode().Perm() != newFileMode {
		t.Fatalf("new file: %v, %v; want mode %v", fi, err, newFileMode)
	}
	if diff := cmp.Diff(map[string]map[string]any{"gemini": {"enabled": false}}, fileEntries(t, f.path)); diff != "" {
		t.Errorf("new file (-want +got):\n%s", diff)
	}
	if s := r.Snapshot(); s.ETag != etag || status(s, "gemini") != StatusDisabled {
		t.Errorf("after creating: etag %s (returned %s), gemini %s; want equal, disabled", s.ETag, etag, status(s, "gemini"))
	}
}

func TestPatchKeepsASymlink(t *testing.T) {
	f := newFixture(t)
	target := filepath.Join(t.TempDir(), "real.json")
	if err := os.WriteFile(target, []byte(patchBase), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, f.path); err != nil {
		t.Fatal(err)
	}
	r := open(t, f.config())
	if _, err := r.Patch(context.Background(), "codex", []byte(`{"enabled": false}`), r.Snapshot().ETag); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(f.path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("providers.json after Patch: %v, %v; want still a symlink", fi, err)
	}
	if e := fileEntries(t, target)["codex"]; e["enabled"] != false {
		t.Errorf("symlink target's codex = %v; want enabled false", e)
	}
}

func TestPatchWithoutChangeWritesNothing(t *testing.T) {
	f := newFixture(t)
	f.write(t, patchBase)
	r := open(t, f.config())
	etag := r.Snapshot().ETag
	got, err := r.Patch(context.Background(), "codex", []byte(`{"label": "Codex (work)"}`), etag)
	if err != nil || got != etag {
		t.Errorf("no-op Patch = %s, %v; want the same etag %s", got, err, etag)
	}
	if data, _ := os.ReadFile(f.path); string(data) != patchBase {
		t.Errorf("no-op Patch rewrote the file:\n%s", data)
	}
}

func TestPatchWhileWatchedPublishesOnce(t *testing.T) {
	f := newFixture(t)
	f.install(t, "gemini")
	f.write(t, patchBase)
	r := open(t, f.config())
	_, ch, cancel := r.Subscribe()
	defer cancel()
	run(t, r)
	if _, err := r.Patch(context.Background(), "gemini", []byte(`{"enabled": false}`), ""); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ch:
		if !equalIDs(c.Disabled, "gemini") {
			t.Errorf("change = %+v; want gemini disabled", c)
		}
	default:
		t.Fatal("Patch published no change at once")
	}
	noChange(t, ch, "the watcher reading the patched file")
}

func TestPatchErrors(t *testing.T) {
	r := open(t, Config{SelfPath: "/bin/agentpool", Logger: newFixture(t).config().Logger})
	if _, err := r.Patch(context.Background(), "codex", []byte(`{}`), ""); !errors.Is(err, ErrNoFile) {
		t.Errorf("Patch without a file error = %v; want ErrNoFile", err)
	}
	f := newFixture(t)
	f.write(t, `{"version": 1,`)
	r2 := open(t, f.config())
	var ve *ValidationError
	if _, err := r2.Patch(context.Background(), "codex", []byte(`{}`), ""); !errors.As(err, &ve) || !strings.Contains(ve.Msg, "by hand") {
		t.Errorf("Patch of a file that is not JSON error = %v; want a *ValidationError asking for a fix by hand", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r2.Patch(ctx, "codex", []byte(`{}`), ""); !errors.Is(err, context.Canceled) {
		t.Errorf("Patch with a cancelled context error = %v; want context.Canceled", err)
	}
}
