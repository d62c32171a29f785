package acp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// readsPerTurn is how many fs/read_text_file round trips one scripted turn
// makes in BenchmarkReadTextFileACP.
const readsPerTurn = 200

// text4K is 4 KiB of text in 64-byte lines.
var text4K = strings.Repeat(strings.Repeat("x", 63)+"\n", 64)

// timedFS wraps the real acpfs.FS: it stamps the start of each read, so the
// gap between two reads of one turn is one full round trip (agent request →
// backend → acpfs → answer → agent's next request), and it checks what was
// read.
type timedFS struct {
	acp.FileSystem
	mu     sync.Mutex
	stamps []time.Time
	reads  int
	err    error
}

// newTimedFS opens an acpfs.FS on dir, closed when b ends.
func newTimedFS(b *testing.B, dir string) *timedFS {
	b.Helper()
	fsys, err := acpfs.NewFS(acpfs.FSConfig{Root: dir})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fsys.Close() })
	return &timedFS{FileSystem: fsys, stamps: make([]time.Time, 0, readsPerTurn)}
}

func (f *timedFS) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// result returns the number of reads and the first error.
func (f *timedFS) result() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads, f.err
}

func (f *timedFS) ReadTextFile(ctx context.Context, path string, line, limit *int) (string, error) {
	t0 := time.Now()
	text, err := f.FileSystem.ReadTextFile(ctx, path, line, limit)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stamps = append(f.stamps, t0)
	f.reads++
	if err == nil && text != text4K {
		err = fmt.Errorf("read %d bytes; want the 4 KiB file", len(text))
	}
	if err != nil && f.err == nil {
		f.err = err
	}
	return text, err
}

// gaps returns the gaps between successive reads since the last call.
func (f *timedFS) gaps(into []time.Duration) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 1; i < len(f.stamps); i++ {
		into = append(into, f.stamps[i].Sub(f.stamps[i-1]))
	}
	f.stamps = f.stamps[:0]
	return into
}

// readTurns scripts n reads of name: a first turn of the remainder, then
// turns of readsPerTurn (the last turn of a script repeats).
func readTurns(name string, n int) []agenttest.Turn {
	turn := func(k int) agenttest.Turn {
		steps := make([]agenttest.Step, k)
		for i := range steps {
			steps[i] = agenttest.Step{Read: &agenttest.FileOp{Path: name}}
		}
		return agenttest.Turn{Steps: steps}
	}
	var turns []agenttest.Turn
	if rem := n % readsPerTurn; rem > 0 {
		turns = append(turns, turn(rem))
	}
	return append(turns, turn(readsPerTurn))
}

// BenchmarkReadTextFileACP: the fake agent reads a 4 KiB file through
// fs/read_text_file over the real ACP connection, answered by acpfs.NewFS
// on the worktree; one op is one read, p50-µs the median round trip (from
// one request reaching the FileSystem to the next, one whole cycle through
// both processes) and x-ReadFile-p50 its ratio to os.ReadFile's median.
//
//   - backend: acp.Backend and the fake agent as a separate process;
//   - sdk-fake-process: a plain SDK client serving the same FS to the same
//     fake agent process, without agentpool's backend;
//   - sdk-fake-inprocess: the same with the fake agent on a goroutine;
//   - acpfs: the FS alone (the bridge without the protocol);
//   - os.ReadFile: the floor.
func BenchmarkReadTextFileACP(b *testing.B) {
	dir := b.TempDir()
	file := filepath.Join(dir, "file4k.txt")
	if err := os.WriteFile(file, []byte(text4K), 0o644); err != nil {
		b.Fatal(err)
	}
	// reads runs prompt until b.N reads were served by tfs, and reports
	// the round trips and their ratio to os.ReadFile.
	reads := func(b *testing.B, tfs *timedFS, pid int, prompt func()) {
		base := percentile(osReadFileLatencies(b, file, 2000), 50)
		gaps := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		cpu := startCPU(pid)
		for tfs.count() < b.N {
			prompt()
			gaps = tfs.gaps(gaps)
		}
		b.StopTimer()
		cpu.report(b, int64(b.N), "op")
		if n, err := tfs.result(); err != nil || n != b.N {
			b.Fatalf("%d reads, first error %v; want %d reads without error", n, err, b.N)
		}
		if len(gaps) > 0 {
			reportLatency(b, gaps)
			b.ReportMetric(float64(percentile(gaps, 50))/float64(base), "x-ReadFile-p50")
		}
	}
	b.Run("backend", func(b *testing.B) {
		tfs := newTimedFS(b, dir)
		s := agenttest.Script{Turns: readTurns("file4k.txt", b.N)}
		be := benchBackend(b, s, acp.Config{Spec: backends.Spec{Dir: dir}, FS: tfs})
		reads(b, tfs, be.Info().PID, func() {
			res, err := be.Prompt(context.Background(), backends.Prompt{Text: "read"}, nil)
			if err != nil || res.StopReason != backends.StopEndTurn {
				b.Fatalf("Prompt = %v, %v; want end_turn", res.StopReason, err)
			}
		})
	})
	sdk := func(name string, pipes func(*testing.B, agenttest.Script) agentPipes) {
		b.Run(name, func(b *testing.B) {
			tfs := newTimedFS(b, dir)
			s := agenttest.Script{Turns: readTurns("file4k.txt", b.N)}
			c := connectSDKWith(b, pipes(b, s), &benchClient{fs: tfs}, dir)
			defer c.close()
			reads(b, tfs, c.p.pid, func() { c.prompt(b) })
		})
	}
	sdk("sdk-fake-process", fakeProcess)
	sdk("sdk-fake-inprocess", fakeInProcess)
	b.Run("raw-fake-process", func(b *testing.B) {
		// No FS and no JSON encoding on the client: each read is answered
		// with a line prepared once. The fake agent's own cost plus the
		// process boundary: the floor under the backend case.
		result, err := json.Marshal(map[string]string{"content": text4K})
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		var stamps []time.Time
		s := agenttest.Script{Turns: readTurns("file4k.txt", b.N)}
		c := connectRaw(b, fakeProcess(b, s))
		c.serve = func(id json.RawMessage, method string) []byte {
			if method != "fs/read_text_file" {
				b.Fatalf("agent called %s; want fs/read_text_file", method)
			}
			mu.Lock()
			stamps = append(stamps, time.Now())
			mu.Unlock()
			return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", id, result)
		}
		var gaps []time.Duration
		reads := 0
		b.ResetTimer()
		cpu := startCPU(c.pid)
		for reads < b.N {
			c.prompt(b)
			reads += len(stamps)
			for i := 1; i < len(stamps); i++ {
				gaps = append(gaps, stamps[i].Sub(stamps[i-1]))
			}
			stamps = stamps[:0]
		}
		b.StopTimer()
		cpu.report(b, int64(b.N), "op")
		if reads != b.N {
			b.Fatalf("%d reads; want %d", reads, b.N)
		}
		reportLatency(b, gaps)
	})
	b.Run("acpfs", func(b *testing.B) {
		fsys, err := acpfs.NewFS(acpfs.FSConfig{Root: dir})
		if err != nil {
			b.Fatal(err)
		}
		defer fsys.Close()
		lat := make([]time.Duration, 0, b.N)
		ctx := context.Background()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			text, err := fsys.ReadTextFile(ctx, file, nil, nil)
			lat = append(lat, time.Since(t0))
			if err != nil || len(text) != len(text4K) {
				b.Fatalf("ReadTextFile(%q) = %d bytes, %v; want 4096 bytes", file, len(text), err)
			}
		}
		b.StopTimer()
		reportLatency(b, lat)
	})
	b.Run("os.ReadFile", func(b *testing.B) {
		reportLatency(b, osReadFileLatencies(b, file, b.N))
	})
}

// osReadFileLatencies reads file n times with os.ReadFile.
func osReadFileLatencies(b *testing.B, file string, n int) []time.Duration {
	b.Helper()
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		data, err := os.ReadFile(file)
		lat = append(lat, time.Since(t0))
		if err != nil || len(data) != len(text4K) {
			b.Fatalf("os.ReadFile(%q) = %d bytes, %v; want 4096 bytes", file, len(data), err)
		}
	}
	return lat
}
