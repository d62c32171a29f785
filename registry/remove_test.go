package registry

import (
	"context"
	"errors"
	"testing"
)

// TestRemove deletes a custom provider's entry from the file and from the
// configuration in force; a built-in is refused (it can only be disabled),
// as is an id that is not there.
func TestRemove(t *testing.T) {
	f := newFixture(t)
	f.write(t, `{"version": 1, "providers": {
  "mine": {"extends": "acp", "label": "Mine", "command": ["/bin/true"]},
  "codex": {"enabled": false}
}}
`)
	r := open(t, f.config())
	ctx := context.Background()
	if _, ok := r.Snapshot().Provider("mine"); !ok {
		t.Fatal("provider mine not loaded")
	}
	if _, err := r.Remove(ctx, "mine", ""); err != nil {
		t.Fatalf("Remove(mine) error = %v", err)
	}
	if _, ok := r.Snapshot().Provider("mine"); ok {
		t.Error("provider mine still in force after Remove")
	}
	entries := fileEntries(t, f.path)
	if _, ok := entries["mine"]; ok {
		t.Errorf("file still has mine: %v", entries)
	}
	if e, ok := entries["codex"]; !ok || e["enabled"] != false {
		t.Errorf("Remove changed another entry: %v", entries)
	}
	if _, err := r.Remove(ctx, "codex", ""); !errors.Is(err, ErrBuiltIn) {
		t.Errorf("Remove(codex) error = %v; want ErrBuiltIn", err)
	}
	if _, err := r.Remove(ctx, "mine", ""); !errors.Is(err, ErrUnknown) {
		t.Errorf("Remove of a removed provider error = %v; want ErrUnknown", err)
	}
	if _, ok := fileEntries(t, f.path)["codex"]; !ok {
		t.Error("a refused Remove changed the file")
	}
}
