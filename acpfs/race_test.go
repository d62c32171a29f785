package acpfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestSymlinkSwapRace flips root/flip between a real directory and a
// symlink to the outside directory while reads and writes of files under it
// run. Nothing outside may ever be read or written.
func TestSymlinkSwapRace(t *testing.T) {
	for _, target := range []string{"absolute", "relative"} {
		t.Run(target, func(t *testing.T) {
			f, tr, _ := newTestFS(t, FSConfig{})
			link := tr.outside
			if target == "relative" {
				link = "../outside"
			}
			flip := filepath.Join(tr.root, "flip")
			const inside = "inside\n"
			const flips = 300

			var stop atomic.Bool
			var wg sync.WaitGroup
			var reads, writes, canaryReads, otherReads atomic.Int64
			for w := range 2 {
				wg.Add(2)
				go func() { // reader
					defer wg.Done()
					for !stop.Load() {
						got, err := f.ReadTextFile(context.Background(), flip+"/canary.txt", nil, nil)
						if err == nil {
							reads.Add(1)
							switch got {
							case inside:
							case canary:
								canaryReads.Add(1)
							default:
								otherReads.Add(1)
							}
						}
					}
				}()
				go func() { // writer
					defer wg.Done()
					name := flip + "/w" + string(rune('0'+w)) + ".txt"
					for !stop.Load() {
						if f.WriteTextFile(context.Background(), name, "written\n") == nil {
							writes.Add(1)
						}
					}
				}()
			}
			for range flips {
				// A real directory holding a file named like the canary,
				// staged and renamed into place...
				stage := filepath.Join(tr.root, "stage")
				if err := os.Mkdir(stage, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(stage, "canary.txt"), []byte(inside), 0o644); err != nil {
					t.Fatal(err)
				}
				os.RemoveAll(flip)
				for os.Rename(stage, flip) != nil {
					os.RemoveAll(flip) // a writer created it meanwhile
				}
				// ...then a symlink to the outside directory.
				os.RemoveAll(flip)
				os.Symlink(link, flip)
			}
			stop.Store(true)
			wg.Wait()
			if n := canaryReads.Load(); n > 0 {
				t.Errorf("%d reads returned content from outside the worktree", n)
			}
			if n := otherReads.Load(); n > 0 {
				t.Errorf("%d reads returned content that was never written", n)
			}
			tr.checkOutside(t)
			t.Logf("%d flips, %d successful reads, %d successful writes", flips, reads.Load(), writes.Load())
		})
	}
}

// TestWriteIsAtomic checks that a reader never sees a partly written file
// while writers replace it.
func TestWriteIsAtomic(t *testing.T) {
	f, tr, _ := newTestFS(t, FSConfig{})
	p := tr.root + "/atomic.txt"
	contents := []string{strings.Repeat("a", 256<<10), strings.Repeat("b\n", 64<<10)}
	if err := f.WriteTextFile(context.Background(), p, contents[0]); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			got, err := f.ReadTextFile(context.Background(), p, nil, nil)
			if err != nil || (got != contents[0] && got != contents[1]) {
				bad.Add(1)
			}
		}
	}()
	for i := range 100 {
		if err := f.WriteTextFile(context.Background(), p, contents[i%2]); err != nil {
			t.Errorf("WriteTextFile(%q) error = %v", p, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Errorf("%d reads saw a partial or failed file during replacement", n)
	}
	checkNoTempFiles(t, tr.root)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		t.Errorf("file vanished after writes")
	}
}
