package permission

import (
	"context"
	"log/slog"
	"sync"
	"testing"
)

func BenchmarkDecidePolicy(b *testing.B) {
	p, err := PolicyFrom(map[string]string{"edit": "allow", "execute": "deny", "fs.write": "ask"}, "")
	if err != nil {
		b.Fatal(err)
	}
	actions := append(Actions(), "unknown")
	var sink Decision
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sink = p.Decide(actions[i%len(actions)])
	}
	_ = sink
}

// BenchmarkRequestAnswer measures the ask → Answer round trip: answered
// inside OnRequested, and answered from another goroutine as the HTTP API
// would.
func BenchmarkRequestAnswer(b *testing.B) {
	req := Request{Session: "s", Agent: "a", ToolKind: "execute", Options: agentOptions()}
	discard := slog.New(slog.DiscardHandler)

	b.Run("callback", func(b *testing.B) {
		var br *Broker
		br = NewBroker(Config{Logger: discard, OnRequested: func(p Pending) {
			if err := br.Answer(p.Request.Session, p.ID, KindAllowOnce); err != nil {
				b.Error(err)
			}
		}})
		defer br.Close()
		b.ReportAllocs()
		for b.Loop() {
			if out, err := br.Request(context.Background(), req); err != nil || out.DecidedBy != DecidedByUser {
				b.Fatalf("Request = %+v, %v", out, err)
			}
		}
	})

	b.Run("goroutine", func(b *testing.B) {
		requested := make(chan Pending, 1)
		br := NewBroker(Config{Logger: discard, OnRequested: func(p Pending) { requested <- p }})
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Go(func() {
			for {
				select {
				case p := <-requested:
					if err := br.Answer(p.Request.Session, p.ID, KindAllowOnce); err != nil {
						b.Error(err)
					}
				case <-stop:
					return
				}
			}
		})
		defer func() { close(stop); wg.Wait(); br.Close() }()
		b.ReportAllocs()
		for b.Loop() {
			if out, err := br.Request(context.Background(), req); err != nil || out.DecidedBy != DecidedByUser {
				b.Fatalf("Request = %+v, %v", out, err)
			}
		}
	})
}

// BenchmarkRequestPolicy measures a request the policy decides at once.
func BenchmarkRequestPolicy(b *testing.B) {
	br := NewBroker(Config{Logger: slog.New(slog.DiscardHandler)})
	defer br.Close()
	req := Request{Session: "s", Agent: "a", ToolKind: "read", Options: agentOptions()}
	b.ReportAllocs()
	for b.Loop() {
		if out, err := br.Request(context.Background(), req); err != nil || out.DecidedBy != DecidedByPolicy {
			b.Fatalf("Request = %+v, %v", out, err)
		}
	}
}
