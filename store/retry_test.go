package store

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func countLines(log, substr string) int {
	n := 0
	for line := range strings.Lines(log) {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// fastRetry makes the writer give up on a lock quickly and retry often.
func fastRetry(path string) Config {
	return Config{Path: path, BusyTimeout: 5 * time.Millisecond, RetryBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}
}

func TestFailedBatchesAreRetriedInOrder(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentpool.db")
	s, logs := openTest(t, fastRetry(path))
	mustSession(t, s, "s1")

	release := lockDB(t, path) // another process holds the write lock
	for seq := int64(1); seq <= 100; seq++ {
		s.Append(testEvent("s1", seq, time.Now()))
	}
	waitFor(t, "three failed attempts", func() bool { return s.Stats().Retries >= 3 })
	// More events arrive while the database refuses writes.
	for seq := int64(101); seq <= 200; seq++ {
		s.Append(testEvent("s1", seq, time.Now()))
	}
	flushCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	err := s.Flush(flushCtx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Flush() while locked error = %v; want context.DeadlineExceeded", err)
	}
	if got, err := s.Events(ctx, "s1", 0, 0); err != nil || len(got) != 0 {
		t.Errorf("Events(s1) while locked = %d events, %v; want none yet", len(got), err)
	}

	release()
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush() after unlock error = %v", err)
	}
	got, err := s.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 200 {
		t.Fatalf("Events(s1) after unlock = %d events; want 200", len(got))
	}
	for i, ev := range got {
		if ev.Seq != int64(i+1) {
			t.Fatalf("Events(s1)[%d].Seq = %d; want %d", i, ev.Seq, i+1)
		}
	}
	st := s.Stats()
	if st.Appended != 200 || st.Dropped != 0 || st.Rejected != 0 || st.Retries < 3 {
		t.Errorf("Stats() = %+v; want 200 appended, >= 3 retries, nothing lost", st)
	}
	if !strings.Contains(logs.String(), "database is locked") || countLines(logs.String(), "retrying") < 3 {
		t.Errorf("log lacks the retried failures:\n%s", logs)
	}
}

func TestAppendDropsWhenQueueStaysFull(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentpool.db")
	cfg := fastRetry(path)
	cfg.QueueLimit, cfg.BatchSize, cfg.FlushInterval, cfg.AppendWait = 10, 10, time.Hour, 5*time.Millisecond
	s, logs := openTest(t, cfg)
	mustSession(t, s, "s1")

	release := lockDB(t, path)
	// The first full batch goes to the writer, which retries it.
	for seq := int64(1); seq <= 10; seq++ {
		s.Append(testEvent("s1", seq, time.Now()))
	}
	waitFor(t, "the writer to retry", func() bool { return s.Stats().Retries >= 1 })
	// The next ten fill the queue; the one after waits 5 ms and is dropped.
	for seq := int64(11); seq <= 21; seq++ {
		s.Append(testEvent("s1", seq, time.Now()))
	}
	if st := s.Stats(); st.Dropped != 1 || st.Pending != 20 {
		t.Errorf("Stats() with a full queue = %+v; want 1 dropped, 20 pending", st)
	}
	release()
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush() error = %v", err)
	}
	got, err := s.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 20 || got[19].Seq != 20 {
		t.Errorf("Events(s1) = %d events; want seqs 1..20", len(got))
	}
	if !strings.Contains(logs.String(), "event dropped") {
		t.Errorf("log lacks the drop:\n%s", logs)
	}
}

func TestCloseGivesUpOnAStuckDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentpool.db")
	cfg := fastRetry(path)
	cfg.CloseTimeout = 50 * time.Millisecond
	s, _ := openTest(t, cfg)
	mustSession(t, s, "s1")
	lockDB(t, path)
	for seq := int64(1); seq <= 10; seq++ {
		s.Append(testEvent("s1", seq, time.Now()))
	}
	err := s.Close()
	if err == nil || !strings.Contains(err.Error(), "10 events dropped") {
		t.Errorf("Close() with a locked database error = %v; want one reporting 10 events dropped", err)
	}
	if st := s.Stats(); st.Dropped != 10 || st.Appended != 0 || st.Pending != 0 {
		t.Errorf("Stats() after Close = %+v; want 10 dropped", st)
	}
}
