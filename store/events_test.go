package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/google/go-cmp/cmp"
)

// testEvent returns event seq of session with a payload that names both.
func testEvent(session string, seq int64, at time.Time) backends.Event {
	return backends.Event{
		Seq: seq, Session: session, Agent: "claude", Turn: seq / 10, Time: at.Add(time.Duration(seq) * time.Millisecond),
		Type: backends.EventMessageChunk,
		Data: backends.MustJSON(backends.ChunkData{Role: backends.RoleAgent, Text: fmt.Sprintf("%s/%d", session, seq)}),
	}
}

func TestEventsRoundTripAndPaging(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		clock := newTestClock()
		s, _ := openTest(t, e.db(t, Config{Now: clock.Now}))
		mustSession(t, s, "s1")
		mustSession(t, s, "s2")

		var want1, want2 []backends.Event
		for seq := int64(1); seq <= 25; seq++ {
			for _, sid := range []string{"s1", "s2"} {
				ev := testEvent(sid, seq, clock.Now())
				switch seq {
				case 3:
					ev.Data, ev.Turn, ev.Agent = nil, 0, "" // no payload, outside a turn
				case 4:
					ev.Time = time.Time{} // stamped by the store's clock
				}
				s.Append(ev)
				if ev.Time.IsZero() {
					ev.Time = clock.Now()
				}
				ev.Time = ev.Time.UTC()
				if sid == "s1" {
					want1 = append(want1, ev)
				} else {
					want2 = append(want2, ev)
				}
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatalf("Flush() error = %v", err)
		}
		for sid, want := range map[string][]backends.Event{"s1": want1, "s2": want2} {
			got, err := s.Events(ctx, sid, 0, 0)
			if err != nil {
				t.Fatalf("Events(%s, 0, 0) error = %v", sid, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Events(%s, 0, 0) (-want +got):\n%s", sid, diff)
			}
		}

		tests := []struct {
			after    int64
			limit    int
			wantSeqs []int64
		}{
			{0, 3, []int64{1, 2, 3}},
			{3, 3, []int64{4, 5, 6}},
			{22, 10, []int64{23, 24, 25}},
			{25, 10, nil},
			{24, 0, []int64{25}},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("after=%d,limit=%d", tt.after, tt.limit), func(t *testing.T) {
				got, err := s.Events(ctx, "s1", tt.after, tt.limit)
				if err != nil {
					t.Fatalf("Events(s1, %d, %d) error = %v", tt.after, tt.limit, err)
				}
				var seqs []int64
				for _, ev := range got {
					seqs = append(seqs, ev.Seq)
					if !cmp.Equal(want1[ev.Seq-1], ev) {
						t.Errorf("Events(s1, %d, %d): seq %d = %+v; want %+v", tt.after, tt.limit, ev.Seq, ev, want1[ev.Seq-1])
					}
				}
				if !cmp.Equal(tt.wantSeqs, seqs) {
					t.Errorf("Events(s1, %d, %d) seqs = %v; want %v", tt.after, tt.limit, seqs, tt.wantSeqs)
				}
			})
		}

		// Paging through the whole log in pages of 7 yields it exactly once.
		var paged []backends.Event
		for after := int64(0); ; {
			page, err := s.Events(ctx, "s2", after, 7)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			paged = append(paged, page...)
			after = page[len(page)-1].Seq
		}
		if diff := cmp.Diff(want2, paged); diff != "" {
			t.Errorf("paged Events(s2) (-want +got):\n%s", diff)
		}
	})
}

func TestNextSeq(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{FlushInterval: time.Hour}))
		mustSession(t, s, "s1")
		mustSession(t, s, "s2")
		if got, err := s.NextSeq(ctx, "s1"); err != nil || got != 1 {
			t.Errorf("NextSeq(s1) on an empty log = %d, %v; want 1", got, err)
		}
		// With an hour of linger the writer would hold these; NextSeq must
		// count them anyway.
		for seq := int64(1); seq <= 5; seq++ {
			s.Append(testEvent("s1", seq, time.Now()))
		}
		s.Append(testEvent("s2", 1, time.Now()))
		if got, err := s.NextSeq(ctx, "s1"); err != nil || got != 6 {
			t.Errorf("NextSeq(s1) after 5 appends = %d, %v; want 6", got, err)
		}
		if got, err := s.NextSeq(ctx, "s2"); err != nil || got != 2 {
			t.Errorf("NextSeq(s2) after 1 append = %d, %v; want 2", got, err)
		}
	})
}

func TestConcurrentAppend(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		s, _ := openTest(t, e.db(t, Config{BatchSize: 64}))
		const writers, perWriter = 16, 300
		for w := range writers {
			mustSession(t, s, fmt.Sprintf("w%d", w))
		}
		base := time.Now()
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sid := fmt.Sprintf("w%d", w)
				for seq := int64(1); seq <= perWriter; seq++ {
					s.Append(testEvent(sid, seq, base))
				}
			}()
		}
		wg.Wait()
		if err := s.Flush(ctx); err != nil {
			t.Fatalf("Flush() error = %v", err)
		}
		for w := range writers {
			sid := fmt.Sprintf("w%d", w)
			got, err := s.Events(ctx, sid, 0, 0)
			if err != nil {
				t.Fatalf("Events(%s) error = %v", sid, err)
			}
			if len(got) != perWriter {
				t.Fatalf("Events(%s) = %d events; want %d", sid, len(got), perWriter)
			}
			for i, ev := range got {
				var chunk backends.ChunkData
				if err := json.Unmarshal(ev.Data, &chunk); err != nil || ev.Seq != int64(i+1) || chunk.Text != fmt.Sprintf("%s/%d", sid, i+1) {
					t.Fatalf("Events(%s)[%d] = seq %d text %q (err %v); want seq %d", sid, i, ev.Seq, chunk.Text, err, i+1)
				}
			}
		}
		st := s.Stats()
		if st.Appended != writers*perWriter || st.Dropped != 0 || st.Rejected != 0 || st.Pending != 0 {
			t.Errorf("Stats() = %+v; want %d appended, nothing dropped, rejected or pending", st, writers*perWriter)
		}
		if st.Batches >= writers*perWriter/4 {
			t.Errorf("Stats().Batches = %d for %d events; want real batching", st.Batches, writers*perWriter)
		}
	})
}

func TestGroupCommitBatches(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		t.Run("burst", func(t *testing.T) {
			// With an hour of linger a batch commits only once it is full (or
			// at the final Flush). Each take of k >= 50 events makes at most
			// 2k/50 transactions, so 500 events take between 10 and 21.
			s, _ := openTest(t, e.db(t, Config{BatchSize: 50, FlushInterval: time.Hour}))
			mustSession(t, s, "s1")
			for seq := int64(1); seq <= 500; seq++ {
				s.Append(testEvent("s1", seq, time.Now()))
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatalf("Flush() error = %v", err)
			}
			st := s.Stats()
			if st.Appended != 500 || st.Batches < 10 || st.Batches > 21 {
				t.Errorf("Stats() after a burst of 500 = %+v; want 500 appended in 10..21 batches", st)
			}
		})
		t.Run("flush each", func(t *testing.T) {
			// A Flush after every Append commits each event on its own: the
			// counter counts transactions, not calls.
			s, _ := openTest(t, e.db(t, Config{BatchSize: 50, FlushInterval: time.Hour}))
			mustSession(t, s, "s1")
			for seq := int64(1); seq <= 20; seq++ {
				s.Append(testEvent("s1", seq, time.Now()))
				if err := s.Flush(ctx); err != nil {
					t.Fatalf("Flush() error = %v", err)
				}
			}
			if st := s.Stats(); st.Appended != 20 || st.Batches != 20 {
				t.Errorf("Stats() after 20 flushed appends = %+v; want 20 appended in 20 batches", st)
			}
		})
	})
}

func TestRejectedEventsDoNotBlockTheLog(t *testing.T) {
	ctx := context.Background()
	s, logs := openTest(t, Config{})
	mustSession(t, s, "s1")
	at := time.Now()
	first2 := testEvent("s1", 2, at)
	dup := testEvent("s1", 2, at)
	dup.Data = json.RawMessage(`{"dup":true}`)
	for _, ev := range []backends.Event{
		testEvent("s1", 1, at),
		first2,
		dup,                      // duplicate seq
		testEvent("nope", 1, at), // unknown session
		testEvent("s1", 0, at),   // seq must be > 0
		testEvent("s1", 3, at),
	} {
		s.Append(ev)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush() error = %v", err)
	}
	got, err := s.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Seq != 1 || got[2].Seq != 3 || string(got[1].Data) != string(first2.Data) {
		t.Errorf("Events(s1) = %+v; want seqs 1, 2 (the first one), 3", got)
	}
	if st := s.Stats(); st.Appended != 3 || st.Rejected != 3 || st.Retries != 0 {
		t.Errorf("Stats() = %+v; want 3 appended, 3 rejected, no retry", st)
	}
	if n := countLines(logs.String(), "event rejected"); n != 3 {
		t.Errorf("log has %d 'event rejected' lines; want 3:\n%s", n, logs)
	}
}

func TestCloseFlushesPendingEvents(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		loc := e.db(t, Config{})
		// An hour of linger: without Close's drain nothing below a full batch
		// would be written.
		s, _ := openTest(t, at(loc, Config{FlushInterval: time.Hour, BatchSize: 1000}))
		mustSession(t, s, "s1")
		for seq := int64(1); seq <= 999; seq++ {
			s.Append(testEvent("s1", seq, time.Now()))
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close() error = %v", err)
		}
		s.Append(testEvent("s1", 1000, time.Now()))
		if st := s.Stats(); st.Appended != 999 || st.Dropped != 1 || st.Pending != 0 {
			t.Errorf("Stats() after Close and a late Append = %+v; want 999 appended, 1 dropped", st)
		}

		s2, _ := openTest(t, at(loc, Config{}))
		got, err := s2.Events(ctx, "s1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 999 || got[998].Seq != 999 {
			t.Errorf("Events(s1) after reopen = %d events; want 999", len(got))
		}
		if next, err := s2.NextSeq(ctx, "s1"); err != nil || next != 1000 {
			t.Errorf("NextSeq(s1) after reopen = %d, %v; want 1000", next, err)
		}
	})
}
