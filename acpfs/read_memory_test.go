package acpfs

import (
	"context"
	"errors"
	"fmt"
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

// Concurrent reads of a big file hold no more than the read budget, until
// their answers are written: the live heap, sampled while 16 reads of an
// 8 MiB file run and each encodes its content piece by piece, as a backend
// does, grows by no more than the budget counted (which stays within
// ReadBudget, far below one file), and nothing is kept once they are done
// and the FS is closed.
func TestConcurrentReadsBoundedMemory(t *testing.T) {
	const fileSize, readers = 8 << 20, 16
	const budget = 1 << 20
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
			err := f.ReadTextFileFunc(context.Background(), p, nil, nil, func(c *Content) error {
				enc := make([]byte, 0, ReadChunk) // a backend's answer buffer
				n, pieces := 0, 0
				err := c.Each(func(piece []byte) error {
					enc = append(enc[:0], piece...)
					n += len(piece)
					if pieces++; pieces%32 == 0 {
						time.Sleep(time.Millisecond)
					}
					return nil
				})
				runtime.KeepAlive(enc)
				if err == nil && n != fileSize {
					err = fmt.Errorf("read %d bytes; want %d", n, fileSize)
				}
				return err
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
	counted := f.bytes.peakUsed()
	t.Logf("live heap: base %d MiB, peak %+d KiB during %d concurrent %d MiB reads (budget counted at most %d KiB of %d KiB; whole files: %d MiB), after close %+d KiB",
		base>>20, grow>>10, readers, fileSize>>20, counted>>10, budget>>10, readers*fileSize>>20, (int64(after)-int64(base))>>10)
	if counted > budget {
		t.Errorf("the reads counted %d KiB at once; want at most the %d KiB budget", counted>>10, budget>>10)
	}
	if grow > counted+1<<20 {
		t.Errorf("live heap grew by %d KiB during the reads; want at most the %d KiB the budget counted (+1 MiB)", grow>>10, counted>>10)
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
	go f.ReadTextFileFunc(context.Background(), tr.root+"/a.txt", nil, nil, func(*Content) error {
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
