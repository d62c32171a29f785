package pool

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/store"
)

// BenchmarkDelivery measures the delivery latency of events, from the
// publish call to a subscriber's Next returning them, with 100 subscribers
// of one session's feed and a publisher at 20 000 events/s, for 2 s per
// iteration, through a real store on a file. "durable" delivers from the
// store's commit hook (what the pool does); "queued" is the old behaviour,
// delivering as soon as the event is queued, for comparison. It reports
// p50-ms and p99-ms over every (event, subscriber) pair.
func BenchmarkDelivery(b *testing.B) {
	for _, mode := range []struct {
		name    string
		durable bool
		linger  time.Duration
	}{
		{"durable", true, 0}, // the store's default FlushInterval
		{"durable-linger-2ms", true, 2 * time.Millisecond}, // the earlier default
		{"queued", false, 0},
	} {
		b.Run(mode.name, func(b *testing.B) {
			var lat []time.Duration
			for range b.N {
				lat = append(lat, deliveryRun(b, mode.durable, mode.linger, 100, 20000, 2*time.Second)...)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
		})
	}
}

func deliveryRun(b *testing.B, durable bool, linger time.Duration, subscribers, rate int, span time.Duration) []time.Duration {
	b.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Path: filepath.Join(b.TempDir(), "agentpool.db"), FlushInterval: linger})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateSession(ctx, store.Session{ID: "s", Repo: "/r"}); err != nil {
		b.Fatal(err)
	}
	total := int(span.Seconds() * float64(rate))
	sent := make([]time.Time, total+1) // by seq; written before the event is queued
	feed := NewFeed(DefaultRingSize, func(ctx context.Context, after int64, limit int) ([]backends.Event, error) {
		return st.Events(ctx, "s", after, limit)
	})
	var deliver func(backends.Event)
	if durable {
		deliver = feed.Publish
	}

	var wg sync.WaitGroup
	lats := make([][]time.Duration, subscribers)
	for i := range subscribers {
		sub := feed.Subscribe(0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Close()
			out := make([]time.Duration, 0, total)
			for got := 0; got < total; {
				evs, err := sub.Next(ctx, 0)
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				for _, ev := range evs {
					out = append(out, now.Sub(sent[ev.Seq]))
				}
				got += len(evs)
			}
			lats[i] = out
		}()
	}
	data := json.RawMessage(`{"type":"agent_message_chunk","text":"a chunk of an answer, of a typical size"}`)
	var mu sync.Mutex // the session's lock: seq, queue and (queued mode) feed in one order
	tick := time.NewTicker(time.Millisecond)
	start := time.Now()
	for seq := 1; seq <= total; {
		<-tick.C
		due := min(total, int(time.Since(start).Seconds()*float64(rate)))
		for ; seq <= due; seq++ {
			mu.Lock()
			sent[seq] = time.Now()
			ev := backends.Event{Session: "s", Seq: int64(seq), Type: backends.EventMessageChunk, Time: sent[seq], Data: data}
			st.AppendNotify(ev, deliver)
			if !durable {
				feed.Publish(ev)
			}
			mu.Unlock()
		}
	}
	tick.Stop()
	wg.Wait()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	return all
}
