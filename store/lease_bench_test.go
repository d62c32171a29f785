package store

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// BenchmarkAppendLeased measures what fencing costs the writer on
// PostgreSQL: events per second from one producer to a store without a
// HostID (no leasing) and to one that leases its sessions, whose writer
// reads each batch's leases in the statement that locks their rows.
func BenchmarkAppendLeased(b *testing.B) {
	for _, host := range []string{"", "h1"} {
		name := "off"
		if host != "" {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			s, err := Open(context.Background(), Config{URL: pgCluster.Database(b), HostID: host,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			mustSession(b, s, "s0")
			if s.Leasing() != (host != "") {
				b.Fatalf("Leasing() = %v with HostID %q", s.Leasing(), host)
			}
			ev := benchEvent("s0", 0)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				ev.Seq = int64(i + 1)
				if err := s.WaitRoom(context.Background(), "s0"); err != nil {
					b.Fatal(err)
				}
				s.Append(ev)
			}
			if err := s.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
			b.StopTimer()
			if st := s.Stats(); st.Rejected != 0 {
				b.Fatalf("Stats() = %+v; want nothing rejected", st)
			}
		})
	}
}
