package acpfs

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestTerminalCwdSwapRace exchanges root/d, atomically and over and over,
// between a real directory inside the worktree and a symlink to a directory
// outside it, while terminals start in root/d (and root/d/sub) and print
// their physical working directory. No command may ever run outside.
func TestTerminalCwdSwapRace(t *testing.T) {
	const attempts = 300
	for _, cwd := range []string{"d", "d/sub"} {
		t.Run(strings.ReplaceAll(cwd, "/", "_"), func(t *testing.T) {
			terms, root, _ := newTestTerminals(t, TerminalsConfig{})
			outside := filepath.Join(filepath.Dir(root), filepath.Base(root)+"-outside")
			for _, dir := range []string{filepath.Join(root, "d", "sub"), filepath.Join(outside, "sub")} {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { os.RemoveAll(outside) })
			if err := os.Symlink(outside, filepath.Join(root, "s")); err != nil {
				t.Fatal(err)
			}
			// The exchanger swaps in bursts of random length while holding
			// steady; between bursts root/d is the real directory. Most
			// attempts race the bursts; every tenth takes steady, so that d
			// is real throughout, and must run inside (a guard that refused
			// everything would otherwise pass).
			var stop atomic.Bool
			var steady sync.Mutex
			var wg sync.WaitGroup
			exchange := func() bool {
				if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, "d"), unix.AT_FDCWD, filepath.Join(root, "s"), unix.RENAME_EXCHANGE); err != nil {
					t.Errorf("exchange: %v", err)
					return false
				}
				return true
			}
			wg.Go(func() {
				for !stop.Load() {
					steady.Lock()
					n := 1 + rand.IntN(64)
					ok := true
					for i := 0; ok && i < n; i++ {
						ok = exchange()
					}
					if ok && n%2 == 1 {
						ok = exchange() // end with d real
					}
					steady.Unlock()
					if !ok {
						return
					}
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				}
			})
			var inside, refused, escaped int
			for i := range attempts {
				held := i%10 == 0
				if held {
					steady.Lock()
				}
				id, err := terms.Create(context.Background(), TerminalRequest{Command: "pwd -P", Cwd: filepath.Join(root, cwd)})
				if held {
					steady.Unlock()
					if err != nil {
						t.Errorf("with root/d steady, Create error = %v", err)
					}
				}
				if err != nil {
					refused++
					continue
				}
				if _, err := terms.WaitForExit(context.Background(), id); err != nil {
					t.Fatalf("WaitForExit(%q) error = %v", id, err)
				}
				out, err := terms.Output(id)
				if err != nil {
					t.Fatalf("Output(%q) error = %v", id, err)
				}
				if err := terms.Release(id); err != nil {
					t.Fatalf("Release(%q) error = %v", id, err)
				}
				dir := strings.TrimSpace(out.Output)
				switch {
				case dir == root || strings.HasPrefix(dir, root+"/"):
					inside++
				case dir == "":
					refused++ // the child could not chdir
				default:
					escaped++
					t.Errorf("command ran in %q, outside the worktree %q", dir, root)
				}
			}
			stop.Store(true)
			wg.Wait()
			if inside < attempts/10 {
				t.Errorf("only %d commands ran inside the worktree (%d refused)", inside, refused)
			}
			t.Logf("%d attempts: %d inside, %d refused, %d outside", attempts, inside, refused, escaped)
		})
	}
}

// A relative command path resolves against the opened cwd, not against the
// path string: ./script in root/d runs root/d/script.
func TestTerminalRelativeCommandInCwd(t *testing.T) {
	terms, root, _ := newTestTerminals(t, TerminalsConfig{})
	if err := os.MkdirAll(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "d", "script"), []byte("#!/bin/sh\necho script-ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := terms.Create(context.Background(), TerminalRequest{Command: "./script", Args: []string{"x"}, Cwd: filepath.Join(root, "d")})
	if err != nil {
		t.Fatalf("Create(./script) error = %v", err)
	}
	if _, err := terms.WaitForExit(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if out, _ := terms.Output(id); !strings.Contains(out.Output, "script-ran") {
		t.Errorf("Output = %q; want script-ran", out.Output)
	}
}

// A cwd that is a file is refused as not a directory; a missing one as not
// found.
func TestTerminalCwdNotDirectory(t *testing.T) {
	terms, root, _ := newTestTerminals(t, TerminalsConfig{})
	if err := os.WriteFile(filepath.Join(root, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := terms.Create(context.Background(), TerminalRequest{Command: "true", Cwd: filepath.Join(root, "f")})
	if !errors.Is(err, ErrNotDirectory) {
		t.Errorf("Create(cwd file) error = %v; want ErrNotDirectory", err)
	}
	_, err = terms.Create(context.Background(), TerminalRequest{Command: "true", Cwd: filepath.Join(root, "missing")})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("Create(cwd missing) error = %v; want ErrNotFound", err)
	}
}
