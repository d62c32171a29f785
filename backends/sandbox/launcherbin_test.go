package sandbox_test

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends/sandbox"
)

// copyExe copies the test binary to path with mode.
func copyExe(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// The daemon starts confined processes through the small launcher beside
// its binary only when it is a file only the daemon's owner may change,
// from the same build; otherwise through its own binary, saying why.
func TestLauncherNextTo(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "agentpool")
	copyExe(t, self, 0o755)
	own := []string{self, sandbox.LauncherCommand}
	small := filepath.Join(dir, sandbox.LauncherBinary)

	if got, why := sandbox.LauncherNextTo(self); !slices.Equal(got, own) || why != "" {
		t.Errorf("with no launcher beside: %q (%q); want %q and no reason", got, why, own)
	}

	copyExe(t, small, 0o755)
	if got, why := sandbox.LauncherNextTo(self); !slices.Equal(got, []string{small}) || why != "" {
		t.Errorf("with the launcher of the same build beside: %q (%q); want %s", got, why, small)
	}
	// Through a symlink to the daemon's binary, as an install may make.
	link := filepath.Join(t.TempDir(), "agentpool")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	if got, _ := sandbox.LauncherNextTo(link); !slices.Equal(got, []string{small}) {
		t.Errorf("for a daemon started through a symlink: %q; want %s beside its real path", got, small)
	}

	// In a directory anyone may write (and not sticky), another user
	// could replace it after the check.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if got, why := sandbox.LauncherNextTo(self); !slices.Equal(got, own) || !strings.Contains(why, "directory others may change") {
		t.Errorf("in a world-writable directory: %q (%q); want the daemon's own binary and why", got, why)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if got, why := sandbox.LauncherNextTo(self); !slices.Equal(got, []string{small}) {
		t.Errorf("in a sticky directory such as /tmp: %q (%q); want %s", got, why, small)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.Chmod(small, 0o775); err != nil {
		t.Fatal(err)
	}
	if got, why := sandbox.LauncherNextTo(self); !slices.Equal(got, own) || !strings.Contains(why, "changed by others") {
		t.Errorf("with a group-writable launcher: %q (%q); want the daemon's own binary and why", got, why)
	}

	// Another build: a program that answers another identity.
	if err := os.WriteFile(small, []byte("#!/bin/sh\necho go0.0 another build\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, why := sandbox.LauncherNextTo(self); !slices.Equal(got, own) || !strings.Contains(why, "another build") {
		t.Errorf("with a launcher of another build: %q (%q); want the daemon's own binary and why", got, why)
	}

	if err := os.Remove(small); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, small); err != nil {
		t.Fatal(err)
	}
	if got, why := sandbox.LauncherNextTo(self); !slices.Equal(got, own) || !strings.Contains(why, "not a regular file") {
		t.Errorf("with a symlink as launcher: %q (%q); want the daemon's own binary and why", got, why)
	}
}

// The identity changes with the policy a launcher reads.
func TestLauncherIdentityNamesThePolicy(t *testing.T) {
	id := sandbox.LauncherIdentity()
	if !strings.Contains(id, " policy=") || !strings.HasPrefix(id, "go") {
		t.Errorf("LauncherIdentity() = %q; want the toolchain and the policy's shape", id)
	}
}
