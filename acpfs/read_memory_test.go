package acpfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// heapLive returns the live heap after a collection.
func heapLive() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Concurrent reads of a big file stay within the read budget: the live heap,
// sampled while 16 reads of an 8 MiB file run and each holds an encoded copy
// of the content, never grows by much more than ReadBudget, and nothing is
// kept once they are done and the FS is closed.
func TestConcurrentReadsBoundedMemory(t *testing.T) {
	const fileSize, readers = 8 << 20, 16
	const budget = 32 << 20 // two reads at a time: each counts 2 × 8 MiB
	root := t.TempDir()
	p := filepath.Join(root, "big.txt")
	if err := os.WriteFile(p, []byte(strings.Repeat("0123456789abcde\n", fileSize/16)), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := NewFS(FSConfig{Root: root, ReadBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	base := heapLive()
	var peak uint64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			peak = max(peak, heapLive())
		}
	})
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			err := f.ReadTextFileFunc(context.Background(), p, nil, nil, func(s string) error {
				enc := []byte(s) // the encoded answer a backend would write
				time.Sleep(20 * time.Millisecond)
				runtime.KeepAlive(enc)
				if len(s) != fileSize {
					return errors.New("short read")
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	after := heapLive()
	grow := int64(peak) - int64(base)
	t.Logf("live heap: base %d MiB, peak +%d MiB during %d concurrent %d MiB reads (unbounded: about +%d MiB), after close %+d KiB",
		base>>20, grow>>20, readers, fileSize>>20, readers*2*fileSize>>20, (int64(after)-int64(base))>>10)
	if grow > budget+8<<20 {
		t.Errorf("live heap grew by %d MiB during the reads; want at most the %d MiB budget (+8 MiB)", grow>>20, budget>>20)
	}
	if kept := int64(after) - int64(base); kept > 2<<20 {
		t.Errorf("live heap after the reads and Close is %d KiB above the start; want nothing kept", kept>>10)
	}
}

// A read that waits for the budget gives up when its context ends.
func TestReadWaitCancelled(t *testing.T) {
	f, tr, _ := newTestFS(t, FSConfig{MaxReads: 1})
	hold := make(chan struct{})
	started := make(chan struct{})
	go f.ReadTextFileFunc(context.Background(), tr.root+"/a.txt", nil, nil, func(string) error {
		close(started)
		<-hold
		return nil
	})
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := f.ReadTextFile(ctx, tr.root+"/a.txt", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ReadTextFile while the only slot is taken = %v; want DeadlineExceeded", err)
	}
	close(hold)
	if got, err := f.ReadTextFile(context.Background(), tr.root+"/a.txt", nil, nil); err != nil || got != "alpha\n" {
		t.Errorf("ReadTextFile after the slot is free = %q, %v", got, err)
	}
}
