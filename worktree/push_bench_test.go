package worktree

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkPushAfterCheckpoint measures what a session given by URL pays
// after each turn on top of its checkpoint: LastPushed and Push of a
// changed checkpoint to a file:// remote (push-ns/op), against the
// checkpoint itself (checkpoint-ns/op); and a Push with nothing new
// (unchanged-push-ns/op), as before a turn.
func BenchmarkPushAfterCheckpoint(b *testing.B) {
	ctx := context.Background()
	shared := newShared(b, map[string]string{"README.md": "x\n"})
	m := newHost(b)
	wt, err := m.Create(ctx, "s1", "file://"+shared, "")
	if err != nil {
		b.Fatal(err)
	}
	var cpNs, pushNs, sameNs int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		writeFile(b, wt.Path, "work.txt", fmt.Sprintf("turn %d\n", i))
		start := time.Now().UnixNano()
		if _, err := m.Checkpoint(ctx, wt); err != nil {
			b.Fatal(err)
		}
		mid := time.Now().UnixNano()
		lease, err := m.LastPushed(ctx, wt)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Push(ctx, wt, lease); err != nil {
			b.Fatal(err)
		}
		end := time.Now().UnixNano()
		lease, _ = m.LastPushed(ctx, wt)
		if _, err := m.Push(ctx, wt, lease); err != nil {
			b.Fatal(err)
		}
		cpNs += mid - start
		pushNs += end - mid
		sameNs += time.Now().UnixNano() - end
	}
	b.ReportMetric(float64(cpNs)/float64(b.N), "checkpoint-ns/op")
	b.ReportMetric(float64(pushNs)/float64(b.N), "push-ns/op")
	b.ReportMetric(float64(sameNs)/float64(b.N), "unchanged-push-ns/op")
}
