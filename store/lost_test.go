package store

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// TestLossAtCloseReportedAtNextOpen gives up events at Close (the database
// stays unwritable) and checks that the next Open stores, in each affected
// session's history, one error event saying how many events could not be
// stored and which seqs they had, after those seqs (never reused), and
// that a further Open does not report them again.
func TestLossAtCloseReportedAtNextOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentpool.db")
	cfg := fastRetry(path)
	cfg.CloseTimeout = 50 * time.Millisecond
	s, _ := openTest(t, cfg)
	mustSession(t, s, "s1")
	mustSession(t, s, "s2")
	for seq := int64(1); seq <= 3; seq++ {
		s.Append(testEvent("s1", seq, time.Now()))
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	release := lockDB(t, path)
	for seq := int64(4); seq <= 10; seq++ {
		ev := testEvent("s1", seq, time.Now())
		ev.Turn = 2
		s.Append(ev)
	}
	for seq := int64(1); seq <= 5; seq++ {
		s.Append(testEvent("s2", seq, time.Now()))
	}
	waitFor(t, "the writer to retry", func() bool { return s.Stats().Retries >= 1 })
	err := s.Close()
	if err == nil || !strings.Contains(err.Error(), "12 events dropped") {
		t.Fatalf("Close() error = %v; want 12 events dropped", err)
	}
	release()

	for open := 1; open <= 2; open++ {
		s2, _ := openTest(t, Config{Path: path})
		got, err := s2.Events(ctx, "s1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 || got[3].Seq != 11 || got[3].Type != backends.EventError {
			t.Fatalf("open %d: Events(s1) = %+v; want 3 stored events and the loss report as seq 11, after the lost ones", open, got)
		}
		var d struct {
			Error string      `json:"error"`
			Lost  sessionLoss `json:"lost"`
		}
		if err := json.Unmarshal(got[3].Data, &d); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(d.Error, "7 events could not be stored") || d.Lost.Count != 7 || d.Lost.FromSeq != 4 ||
			d.Lost.ToSeq != 10 || len(d.Lost.Turns) != 1 || d.Lost.Turns[0] != 2 {
			t.Errorf("open %d: loss report of s1 = %+v; want 7 events, seq 4 to 10, turn 2", open, d)
		}
		got2, err := s2.Events(ctx, "s2", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got2) != 1 || got2[0].Seq != 6 || !strings.Contains(string(got2[0].Data), "5 events could not be stored") {
			t.Errorf("open %d: Events(s2) = %+v; want only the report of 5 lost events", open, got2)
		}
		if err := s2.Close(); err != nil {
			t.Errorf("open %d: Close() error = %v", open, err)
		}
	}
	b, err := os.ReadFile(path + lossSuffix)
	if err != nil || len(b) != lossLogSize || strings.Trim(string(b), "\x00") != "" {
		t.Errorf("loss log after the report = %d bytes %q, %v; want %d zero bytes", len(b), strings.Trim(string(b), "\x00"), err, lossLogSize)
	}
}

// TestLossRecordFits checks that a record with more sessions than the loss
// log holds keeps those with the most losses and counts the rest.
func TestLossRecordFits(t *testing.T) {
	var l losses
	for i := range 400 {
		for range i%7 + 1 {
			l.add(backends.Event{Session: strings.Repeat("x", 20) + string(rune('A'+i%26)) + string(rune('a'+i/26)), Seq: int64(i + 1)})
		}
	}
	b := l.record(lossLogSize)
	var rec lossRecord
	if err := json.Unmarshal(b, &rec); err != nil || len(b) > lossLogSize {
		t.Fatalf("record = %d bytes, %v; want a JSON record of at most %d", len(b), err, lossLogSize)
	}
	var total int64
	for _, sl := range rec.Sessions {
		total += sl.Count
		if sl.Count < rec.Sessions[len(rec.Sessions)-1].Count {
			t.Fatalf("sessions not ordered by losses: %+v", rec.Sessions)
		}
	}
	if rec.Omitted == 0 || total+rec.Omitted != 400/7*28+(400%7)*(400%7+1)/2 {
		t.Errorf("record keeps %d sessions with %d events and omits %d; want all counted", len(rec.Sessions), total, rec.Omitted)
	}
}

// TestAppendPastNeitherWaitsNorDrops fills the write queue while the
// database refuses writes and checks that AppendPast and EndTurnEvent
// still queue at once, past the limit, and that everything is written in
// order once the database takes writes again.
func TestAppendPastNeitherWaitsNorDrops(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentpool.db")
	cfg := fastRetry(path)
	cfg.QueueLimit, cfg.BatchSize, cfg.FlushInterval, cfg.AppendWait = 10, 10, time.Hour, 5*time.Millisecond
	s, _ := openTest(t, cfg)
	mustSession(t, s, "s1")
	n, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}
	release := lockDB(t, path)
	seq := int64(0)
	for range 20 { // a batch for the writer to retry, and a full queue
		seq++
		s.Append(testEvent("s1", seq, time.Now()))
	}
	waitFor(t, "the writer to retry", func() bool { return s.Stats().Retries >= 1 })
	for range 30 {
		seq++
		s.AppendPast(testEvent("s1", seq, time.Now()), nil)
	}
	seq++
	end := testEvent("s1", seq, time.Now())
	end.Type = backends.EventTurnEnded
	if err := s.EndTurnEvent(ctx, n, TurnEnd{StopReason: "timeout"}, end, nil); err != nil {
		t.Fatalf("EndTurnEvent() on a full queue error = %v; want it queued", err)
	}
	if st := s.Stats(); st.Dropped != 0 {
		t.Fatalf("Stats() = %+v; want nothing dropped", st)
	}
	release()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events(ctx, "s1", 0, 0)
	if err != nil || int64(len(got)) != seq || got[len(got)-1].Type != backends.EventTurnEnded {
		t.Fatalf("Events(s1) = %d events, %v; want %d ending with turn.ended", len(got), err, seq)
	}
	if tn, err := s.GetTurn(ctx, "s1", n); err != nil || tn.EndedAt == nil {
		t.Errorf("turn %d after the writes = %+v, %v; want it ended", n, tn, err)
	}
}
