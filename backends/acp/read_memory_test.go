package acp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// heapLive returns the live heap after a collection.
func heapLive() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// procStatusKiB returns a field of /proc/self/status in KiB (VmRSS, VmHWM),
// or -1.
func procStatusKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// bigReadsResult is what bigReads measured in this (the daemon's) process.
type bigReadsResult struct {
	heapGrow int64 // peak live heap above the start, in bytes
	rssGrow  int64 // peak RSS above the start, in bytes (-1: unknown)
	counted  []string
}

// bigReads has a real fake agent process read a file of fileSize bytes with
// readers fs/read_text_file requests in flight at once, through a real
// backend and acpfs.FS with the read budget given, and measures the
// daemon's live heap throughout (a collection in a loop) and its peak RSS.
func bigReads(tb testing.TB, fileSize, budget int64, readers int) bigReadsResult {
	tb.Helper()
	dir := tb.TempDir()
	line := "0123456789abcde\n"
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(strings.Repeat(line, int(fileSize)/len(line))), 0o644); err != nil {
		tb.Fatal(err)
	}
	fsys, err := acpfs.NewFS(acpfs.FSConfig{Root: dir, ReadBudget: budget})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = fsys.Close() })
	par := make([]agenttest.Step, readers)
	for i := range par {
		par[i] = agenttest.Step{Read: &agenttest.FileOp{Path: "big.txt", EchoLen: true}}
	}
	spec := agenttest.Spec("fake", agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Parallel: par}}}}})
	spec.Dir = dir
	// The agent decodes the answers while the daemon collects its heap
	// in a loop: on a loaded machine it may take long to read them, which
	// is not what this test is about.
	b, err := acp.New(acp.Config{Spec: spec, FS: fsys, StopGrace: 200 * time.Millisecond, KillGrace: 200 * time.Millisecond, WriteTimeout: 2 * time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			tb.Errorf("Stop: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := b.Start(ctx, ""); err != nil {
		tb.Fatalf("Start: %v", err)
	}

	debug.FreeOSMemory()
	base, rss := heapLive(), procStatusKiB("VmRSS")
	if os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) != nil { // resets VmHWM
		rss = -1
	}
	var peak int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			peak = max(peak, heapLive())
		}
	})
	var mu sync.Mutex
	var res bigReadsResult
	_, err = b.Prompt(ctx, backends.Prompt{Text: "read", Turn: 1}, func(e backends.Event) {
		var d backends.ChunkData
		if e.Type == backends.EventMessageChunk && json.Unmarshal(e.Data, &d) == nil {
			mu.Lock()
			res.counted = append(res.counted, d.Text)
			mu.Unlock()
		}
	})
	close(stop)
	sampler.Wait()
	if err != nil {
		tb.Fatalf("Prompt: %v", err)
	}
	res.heapGrow = peak - base
	res.rssGrow = -1
	if hwm := procStatusKiB("VmHWM"); rss >= 0 && hwm >= 0 {
		res.rssGrow = (hwm - rss) << 10
	}
	want := fmt.Sprintf("read %d bytes", fileSize/int64(len(line))*int64(len(line)))
	if got := strings.Join(res.counted, "|"); strings.Count(got, want) != readers {
		tb.Errorf("the agent got %q; want %d × %q", got, readers, want)
	}
	return res
}

// Six fs/read_text_file of a 16 MiB file in flight at once, from a real
// agent process through the real backend, hold no more than the 8 MiB read
// budget in the daemon until their answers are written: the content, its
// encoding and the answer are never held whole (the daemon's live heap,
// sampled throughout, is the bytes held).
func TestConcurrentBigReadsWithinBudget(t *testing.T) {
	const fileSize, budget, readers = 16 << 20, 8 << 20, 6
	r := bigReads(t, fileSize, budget, readers)
	t.Logf("%d reads of %d MiB at once, read budget %d MiB: live heap peak %+d KiB, RSS peak %+d KiB",
		readers, fileSize>>20, budget>>20, r.heapGrow>>10, r.rssGrow>>10)
	if r.heapGrow > budget {
		t.Errorf("live heap grew by %d MiB during the reads; want at most the %d MiB read budget", r.heapGrow>>20, budget>>20)
	}
}

// BenchmarkConcurrentBigReads is the case: six fs/read_text_file of
// a 64 MiB file in flight at once, from a real agent process through the
// real backend, with the default 64 MiB read budget. It reports the
// daemon's peak live heap and peak RSS above the start of each run.
func BenchmarkConcurrentBigReads(b *testing.B) {
	const readers = 6
	fileSize := int64(64 << 20)
	if testing.Short() {
		fileSize = 8 << 20 // make bench-smoke: the same path, smaller files
	}
	var heap, rss []int64
	for b.Loop() {
		r := bigReads(b, fileSize, acpfs.DefaultReadBudget, readers)
		heap, rss = append(heap, r.heapGrow), append(rss, r.rssGrow)
	}
	b.ReportMetric(float64(slicesMax(heap))/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(slicesMax(rss))/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(readers*fileSize)/(1<<20), "read-MiB")
}

func slicesMax(v []int64) int64 {
	m := int64(0)
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
