package store

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// forEachBenchEngine runs f as a sub-benchmark on each engine.
func forEachBenchEngine(b *testing.B, f func(b *testing.B, e testEngine)) {
	for _, e := range testEngines {
		b.Run(e.name, func(b *testing.B) { f(b, e) })
	}
}

// benchStore opens a store with the default settings on a real file, or
// on a database of its own in the test cluster.
func benchStore(b *testing.B, e testEngine, sessions int) *Store {
	b.Helper()
	cfg := Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if e.postgres {
		cfg.URL = pgCluster.Database(b)
	} else {
		cfg.Path = filepath.Join(b.TempDir(), "bench.db")
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	for i := range sessions {
		mustSession(b, s, fmt.Sprintf("s%d", i))
	}
	return s
}

// benchEvent is a typical streamed chunk, about 200 bytes of JSON.
func benchEvent(session string, seq int64) backends.Event {
	return backends.Event{
		Seq: seq, Session: session, Agent: "claude", Turn: 1, Time: time.Now(), Type: backends.EventMessageChunk,
		Data: backends.MustJSON(backends.ChunkData{Role: backends.RoleAgent, Text: strings.Repeat("token ", 30)}),
	}
}

// BenchmarkAppend measures events per second through group commit to a
// file, from one producer, durable at the end (Flush). The producer waits
// for room in the store's queue before each event, as the pool does for an
// agent's events (Append drops an event that finds the queue full).
func BenchmarkAppend(b *testing.B) {
	forEachBenchEngine(b, func(b *testing.B, e testEngine) {
		s := benchStore(b, e, 1)
		ev := benchEvent("s0", 0)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		for i := range b.N {
			ev.Seq = int64(i + 1)
			if err := s.WaitRoom(ctx, "s0"); err != nil {
				b.Fatal(err)
			}
			s.Append(ev)
		}
		if err := s.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		b.StopTimer()
		st := s.Stats()
		if st.Appended != int64(b.N) {
			b.Fatalf("Stats() = %+v; want %d appended", st, b.N)
		}
		b.ReportMetric(float64(b.N)/float64(st.Batches), "events/batch")
	})
}

// BenchmarkAppendParallel measures events per second from many producers
// appending to 16 sessions at once, each waiting for room in the queue as
// BenchmarkAppend's producer does.
func BenchmarkAppendParallel(b *testing.B) {
	forEachBenchEngine(b, func(b *testing.B, e testEngine) {
		const sessions = 16
		s := benchStore(b, e, sessions)
		var seqs [sessions]atomic.Int64
		var next atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1) % sessions
			sid := fmt.Sprintf("s%d", i)
			ev := benchEvent(sid, 0)
			for pb.Next() {
				if err := s.WaitRoom(context.Background(), sid); err != nil {
					b.Error(err)
					return
				}
				ev.Seq = seqs[i].Add(1)
				s.Append(ev)
			}
		})
		if err := s.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		b.StopTimer()
		if st := s.Stats(); st.Appended != int64(b.N) {
			b.Fatalf("Stats() = %+v; want %d appended", st, b.N)
		}
	})
}

// BenchmarkEventsRead measures reading pages of 100 events after a seq from
// a session log of 10 000 events, as a subscriber catching up does.
func BenchmarkEventsRead(b *testing.B) {
	forEachBenchEngine(b, func(b *testing.B, e testEngine) {
		const total, page = 10000, 100
		ctx := context.Background()
		s := benchStore(b, e, 1)
		for seq := int64(1); seq <= total; seq++ {
			s.Append(benchEvent("s0", seq))
		}
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		for i := range b.N {
			after := int64(i*page*7) % (total - page)
			evs, err := s.Events(ctx, "s0", after, page)
			if err != nil || len(evs) != page || evs[0].Seq != after+1 {
				b.Fatalf("Events(s0, %d, %d) = %d events, %v", after, page, len(evs), err)
			}
		}
		b.ReportMetric(float64(b.N*page)/time.Since(start).Seconds(), "events/s")
	})
}
