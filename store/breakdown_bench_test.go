package store_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/store"
)

// BenchmarkDeliveryBreakdown runs the load of pool's BenchmarkDelivery (100
// subscribers of one session's feed, 20 000 events/s for 2 s per
// iteration, delivery from the commit hook, a real store file) and splits
// each (event, subscriber) latency into the parts that add up to it:
//
//   - queue: publish → the writer woke for it (the writer was busy), plus
//     the earlier transactions of the same take;
//   - linger: the writer lingering for a fuller batch;
//   - exec: BEGIN and the batch's statements;
//   - commit: COMMIT, including a checkpoint it ran (SQLite's
//     autocheckpoint runs inside the commit that crosses its threshold);
//   - callbacks: the commit hooks of the events before it in its batch;
//   - wake: its own hook (Feed.Publish) → the subscriber's Next returning.
//
// It reports p50/p99/max of each part and of the total, and, for the pairs
// at or above the total's p99 (the tail), the mean of each part. It logs
// the commits that ran a checkpoint (seen in the WAL index's backfill
// count) and their durations.
func BenchmarkDeliveryBreakdown(b *testing.B) {
	var agg breakdown
	for range b.N {
		agg.add(breakdownRun(b, 100, 20000, 2*time.Second))
	}
	agg.report(b)
}

// The parts of a delivery latency, in order.
const (
	partQueue = iota
	partLinger
	partExec
	partCommit
	partCallbacks
	partWake
	partTotal
	nParts
)

var partNames = [nParts]string{"queue", "linger", "exec", "commit", "callbacks", "wake", "total"}

// breakdown collects the parts of the latencies of one or more runs.
type breakdown struct {
	parts      [nParts][]time.Duration // per event for the writer's parts, per pair for wake and total
	tailSum    [nParts]time.Duration   // sums over the pairs in their run's tail
	tailN      int
	commits    []time.Duration // every commit
	ckpts      []time.Duration // the commits that ran a checkpoint
	walMax     int64           // the largest WAL file seen at the end of a run
	eventCount int
}

func (a *breakdown) add(r breakdown) {
	for i := range a.parts {
		a.parts[i] = append(a.parts[i], r.parts[i]...)
		a.tailSum[i] += r.tailSum[i]
	}
	a.tailN += r.tailN
	a.commits = append(a.commits, r.commits...)
	a.ckpts = append(a.ckpts, r.ckpts...)
	a.walMax = max(a.walMax, r.walMax)
	a.eventCount += r.eventCount
}

// stamp is a time as the offset from a run's start: pointer-free, so that
// the arrays of them cost the garbage collector nothing to scan.
type stamp time.Duration

// Sub returns s-t.
func (s stamp) Sub(t stamp) time.Duration { return time.Duration(s - t) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct returns the p50, p99 and max of ds, which it sorts.
func pct(ds []time.Duration) (p50, p99, mx time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)*99/100], ds[len(ds)-1]
}

func (a *breakdown) report(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("\npart        p50-ms   p99-ms   max-ms   tail-mean-ms\n")
	for i, name := range partNames {
		p50, p99, mx := pct(a.parts[i])
		tail := time.Duration(0)
		if a.tailN > 0 {
			tail = a.tailSum[i] / time.Duration(a.tailN)
		}
		sb.WriteString(strings.Join([]string{
			padRight(name, 10), fmtMS(p50), fmtMS(p99), fmtMS(mx), fmtMS(tail)}, " ") + "\n")
		if i == partTotal {
			b.ReportMetric(ms(p50), "p50-ms")
			b.ReportMetric(ms(p99), "p99-ms")
			b.ReportMetric(ms(mx), "max-ms")
		}
	}
	c50, c99, cmx := pct(a.commits)
	k50, k99, kmx := pct(a.ckpts)
	sb.WriteString("commits: " + itoa(len(a.commits)) + ", p50/p99/max " + fmtMS(c50) + fmtMS(c99) + fmtMS(cmx) + " ms\n")
	sb.WriteString("commits that checkpointed: " + itoa(len(a.ckpts)) + ", p50/p99/max " + fmtMS(k50) + fmtMS(k99) + fmtMS(kmx) + " ms\n")
	sb.WriteString("events per commit: " + itoa(a.eventCount/max(len(a.commits), 1)) + "; largest WAL file at a run's end: " + itoa(int(a.walMax>>10)) + " KiB\n")
	fmt.Print(sb.String())
}

func padRight(s string, n int) string { return s + strings.Repeat(" ", max(n-len(s), 0)) }

func fmtMS(d time.Duration) string { return fmt.Sprintf("%8.3f", ms(d)) }

func itoa(n int) string { return strconv.Itoa(n) }

// walIndex reads the WAL index (the -shm file) of the database at path:
// how many checkpoints have backfilled frames so far can be told from
// nBackfill and nBackfillAttempted, which change when one runs.
type walIndex struct{ f *os.File }

// ckptState returns nBackfill and nBackfillAttempted (0 when unreadable).
func (w walIndex) ckptState() (uint64, error) {
	var buf [36]byte
	if _, err := w.f.ReadAt(buf[:], 96); err != nil {
		return 0, err
	}
	backfill := binary.LittleEndian.Uint32(buf[0:4])
	attempted := binary.LittleEndian.Uint32(buf[32:36])
	return uint64(backfill)<<32 | uint64(attempted), nil
}

func breakdownRun(b *testing.B, subscribers, rate int, span time.Duration) breakdown {
	b.Helper()
	ctx := context.Background()
	total := int(span.Seconds() * float64(rate))
	n := total + 1
	var (
		sent, woke, took, begin, commit, committed, cb = make([]stamp, n), make([]stamp, n),
			make([]stamp, n), make([]stamp, n), make([]stamp, n), make([]stamp, n), make([]stamp, n)
		ckptBefore uint64
		lastWoke   stamp
		commitAt   stamp
		commits    []time.Duration
		ckpts      []time.Duration
		shm        walIndex
	)
	path := filepath.Join(b.TempDir(), "agentpool.db")
	base := time.Now()
	clock := func() stamp { return stamp(time.Since(base)) }
	hook := func(step store.TraceStep, seqs []int64) {
		now := clock()
		switch step {
		case store.StepWoke:
			lastWoke = now
		case store.StepTook:
			for _, s := range seqs {
				if s > 0 && s < int64(n) {
					woke[s], took[s] = lastWoke, now
				}
			}
		case store.StepBegin:
			for _, s := range seqs {
				if s > 0 && s < int64(n) {
					begin[s] = now
				}
			}
		case store.StepCommit:
			for _, s := range seqs {
				if s > 0 && s < int64(n) {
					commit[s] = now
				}
			}
			if shm.f != nil {
				ckptBefore, _ = shm.ckptState()
			}
			commitAt = clock()
		case store.StepCommitted:
			d := now.Sub(commitAt)
			commits = append(commits, d)
			if shm.f != nil {
				if after, err := shm.ckptState(); err == nil && after != ckptBefore {
					ckpts = append(ckpts, d)
				}
			}
			for _, s := range seqs {
				if s > 0 && s < int64(n) {
					committed[s] = now
				}
			}
		}
	}
	st, err := store.OpenTraced(ctx, store.Config{Path: path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, hook)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateSession(ctx, store.Session{ID: "s", Repo: "/r"}); err != nil {
		b.Fatal(err)
	}
	if err := st.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	// The writer reads shm only from the hook, after this point (the queue
	// orders the assignment before the first event's steps).
	f, err := os.Open(path + "-shm")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	feed := pool.NewFeed(pool.DefaultRingSize, func(ctx context.Context, after int64, limit int) ([]backends.Event, error) {
		return st.Events(ctx, "s", after, limit)
	})
	deliver := func(ev backends.Event) {
		cb[ev.Seq] = clock()
		feed.Publish(ev)
	}

	var wg sync.WaitGroup
	recv := make([][]stamp, subscribers)
	for i := range subscribers {
		sub := feed.Subscribe(0)
		recv[i] = make([]stamp, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Close()
			for got := 0; got < total; {
				evs, err := sub.Next(ctx, 0)
				if err != nil {
					b.Error(err)
					return
				}
				now := clock()
				for _, ev := range evs {
					recv[i][ev.Seq] = now
				}
				got += len(evs)
			}
		}()
	}
	data := json.RawMessage(`{"type":"agent_message_chunk","text":"a chunk of an answer, of a typical size"}`)
	var mu sync.Mutex
	first := true
	tick := time.NewTicker(time.Millisecond)
	start := time.Now()
	for seq := 1; seq <= total; {
		<-tick.C
		due := min(total, int(time.Since(start).Seconds()*float64(rate)))
		for ; seq <= due; seq++ {
			mu.Lock()
			if first {
				shm.f, first = f, false // before the first event is queued
			}
			sent[seq] = clock()
			ev := backends.Event{Session: "s", Seq: int64(seq), Type: backends.EventMessageChunk, Time: base.Add(time.Duration(sent[seq])), Data: data}
			st.AppendNotify(ev, deliver)
			mu.Unlock()
		}
	}
	tick.Stop()
	wg.Wait()
	var r breakdown
	if fi, err := os.Stat(path + "-wal"); err == nil {
		r.walMax = fi.Size()
	}
	r.commits, r.ckpts, r.eventCount = commits, ckpts, total
	totals := make([]time.Duration, 0, total*subscribers)
	for s := 1; s < n; s++ {
		q := begin[s].Sub(took[s])
		l := took[s].Sub(sent[s])
		if woke[s] > sent[s] {
			q += woke[s].Sub(sent[s])
			l = took[s].Sub(woke[s])
		}
		r.parts[partQueue] = append(r.parts[partQueue], q)
		r.parts[partLinger] = append(r.parts[partLinger], l)
		r.parts[partExec] = append(r.parts[partExec], commit[s].Sub(begin[s]))
		r.parts[partCommit] = append(r.parts[partCommit], committed[s].Sub(commit[s]))
		r.parts[partCallbacks] = append(r.parts[partCallbacks], cb[s].Sub(committed[s]))
		for i := range subscribers {
			r.parts[partWake] = append(r.parts[partWake], recv[i][s].Sub(cb[s]))
			totals = append(totals, recv[i][s].Sub(sent[s]))
		}
	}
	r.parts[partTotal] = totals
	sorted := slices.Clone(totals)
	slices.Sort(sorted)
	threshold := sorted[len(sorted)*99/100]
	for s := 1; s < n; s++ {
		for i := range subscribers {
			t := recv[i][s].Sub(sent[s])
			if t < threshold {
				continue
			}
			r.tailN++
			r.tailSum[partTotal] += t
			for p := partQueue; p < partWake; p++ {
				r.tailSum[p] += r.parts[p][s-1]
			}
			r.tailSum[partWake] += recv[i][s].Sub(cb[s])
		}
	}
	return r
}
