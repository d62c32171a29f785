package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// make build stamps the version and the revision itself, so that a
// binary built where Go records no VCS information (GOFLAGS=-buildvcs=false)
// does not say only "dev"; outside a git checkout the build still works,
// and says dev.
func TestMakeBuildStampsTheRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary with make")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	rev := strings.TrimSpace(string(head))
	build := func(t *testing.T, extraEnv ...string) string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "agentpool")
		cmd := exec.Command("make", "-C", root, "build", "BIN="+bin)
		cmd.Env = append(append(os.Environ(), "GOFLAGS=-buildvcs=false"), extraEnv...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make build: %v\n%s", err, out)
		}
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("agentpool version: %v\n%s", err, out)
		}
		return string(out)
	}

	t.Run("git checkout", func(t *testing.T) {
		out := build(t)
		if strings.HasPrefix(out, "agentpool dev\n") || !strings.Contains(out, "  revision  "+rev) {
			t.Errorf("agentpool version built by make with GOFLAGS=-buildvcs=false = %q; want the version from git describe and the revision %s", out, rev)
		}
	})
	t.Run("no git", func(t *testing.T) {
		out := build(t, "GIT_DIR="+filepath.Join(t.TempDir(), "none"))
		if !strings.HasPrefix(out, "agentpool dev\n") || strings.Contains(out, "revision") {
			t.Errorf("agentpool version built by make outside a git checkout = %q; want dev and no revision", out)
		}
	})
}
