package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// groupWritable is a Config.Trust that refuses a file group or others may
// write, as the daemon's does.
func groupWritable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("refusing %s: writable by group or others (mode %04o)", path, fi.Mode().Perm())
	}
	return nil
}

// A file that Config.Trust refuses is rejected like an invalid one, at
// start and on every reload: its reason is the diagnostic, the last good
// config stays in force, and Patch will not edit it.
func TestTrustRefusesTheFile(t *testing.T) {
	f := newFixture(t)
	f.install(t, "gemini")
	f.write(t, geminiOff)
	if err := os.Chmod(f.path, 0o664); err != nil {
		t.Fatal(err)
	}
	cfg := f.config()
	cfg.Trust = groupWritable
	r := open(t, cfg)
	want := "refusing " + f.path + ": writable by group or others (mode 0664)"
	if s := r.Snapshot(); s.Diagnostic != want || status(s, "gemini") != StatusReady {
		t.Fatalf("a refused file at start: diagnostic %q, gemini %s; want %q and the built-in gemini", s.Diagnostic, status(s, "gemini"), want)
	}
	_, ch, cancel := r.Subscribe()
	defer cancel()
	run(t, r)

	if err := os.Chmod(f.path, 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, r, ch, "the file accepted once its mode is fixed", geminiIs(StatusDisabled))

	f.write(t, geminiOn)
	if err := os.Chmod(f.path, 0o646); err != nil {
		t.Fatal(err)
	}
	want = "refusing " + f.path + ": writable by group or others (mode 0646)"
	s := waitUntil(t, r, ch, "a refused edit", func(s Snapshot) bool { return s.Diagnostic != "" })
	if s.Diagnostic != want || status(s, "gemini") != StatusDisabled {
		t.Errorf("a refused edit: diagnostic %q, gemini %s; want %q and the last good config (disabled)", s.Diagnostic, status(s, "gemini"), want)
	}
	if err := r.Reload(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
		t.Errorf("Reload() error = %v; want ErrConfig with %q", err, want)
	}
	if _, err := r.Patch(context.Background(), "gemini", []byte(`{"label": "G"}`), ""); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
		t.Errorf("Patch() of a refused file error = %v; want ErrConfig with %q", err, want)
	}
	if b, _ := os.ReadFile(f.path); string(b) != geminiOn {
		t.Errorf("Patch() of a refused file wrote it: %s", b)
	}
}
