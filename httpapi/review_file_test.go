package httpapi

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A file an agent planted where a review comment points is read only when
// it is a regular file of the worktree and not huge: a FIFO does not hang
// the request, a symlink out of the worktree is not followed.
func TestFileLinesRefusesWhatAnAgentCouldPlant(t *testing.T) {
	wt := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("top secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt, "ok.txt"), []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(wt, "out")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(wt, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	big, err := os.Create(filepath.Join(wt, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Truncate(maxReviewedFile + 1); err != nil {
		t.Fatal(err)
	}
	big.Close()

	if lines, err := fileLines(wt, "ok.txt"); err != nil || strings.Join(lines, ",") != "a,b" {
		t.Errorf("fileLines(ok.txt) = %q, %v", lines, err)
	}
	for _, name := range []string{"out", "fifo", "big"} {
		done := make(chan error, 1)
		go func() {
			lines, err := fileLines(wt, name)
			if strings.Contains(strings.Join(lines, "\n"), "secret") {
				t.Errorf("fileLines(%s) read the secret", name)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("fileLines(%s) = nil error; want it refused", name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("fileLines(%s) hangs", name)
		}
	}
}
