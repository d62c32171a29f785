package store

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"go.uber.org/goleak"
)

// walSize returns the size of the WAL file of s, 0 when there is none.
func walSize(t *testing.T, s *Store) int64 {
	t.Helper()
	fi, err := os.Stat(s.cfg.Path + "-wal")
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatalf("stat WAL: %v", err)
	}
	return fi.Size()
}

// kibEvent is an event of about 1 KiB.
func kibEvent(seq int64) backends.Event {
	return backends.Event{Session: "s1", Seq: seq, Type: backends.EventMessageChunk,
		Data: backends.MustJSON(backends.ChunkData{Role: backends.RoleAgent, Text: strings.Repeat("x", 1000)})}
}

// TestWALStaysUnderLimit writes ten times WALLimit of events as fast as the
// writer takes them, so that the checkpoints that never block the writer
// cannot finish (commits keep coming), and checks that the WAL file stays
// under its limit, plus one transaction, all along.
func TestWALStaysUnderLimit(t *testing.T) {
	const limit = 4 << 20
	ctx := context.Background()
	s, logs := openTest(t, Config{WALLimit: limit, CheckpointInterval: 2 * time.Millisecond})
	mustSession(t, s, "s1")
	var (
		mu      sync.Mutex
		largest int64
		stop    = make(chan struct{})
		sampled = make(chan struct{})
	)
	go func() {
		defer close(sampled)
		for {
			size := walSize(t, s)
			mu.Lock()
			largest = max(largest, size)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	total := int64(10 * limit / 1024)
	for seq := int64(1); seq <= total; seq++ {
		if err := s.WaitRoom(ctx, ""); err != nil {
			t.Fatalf("WaitRoom() error = %v", err)
		}
		s.Append(kibEvent(seq))
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush() error = %v", err)
	}
	close(stop)
	<-sampled
	largest = max(largest, walSize(t, s))
	if st := s.Stats(); st.Appended != total {
		t.Fatalf("Stats() = %+v; want %d appended", st, total)
	}
	// A transaction of 256 events of 1 KiB writes less than 512 KiB.
	if largest > limit+512<<10 {
		t.Errorf("WAL file reached %d bytes writing %d events of 1 KiB; want at most WALLimit %d + 512 KiB; log:\n%s",
			largest, total, limit, logs)
	}
}

// TestWALTruncatedWhenIdle checks that the WAL file is folded into the
// database and emptied once the writes stop, and then holds one frame,
// written by the checkpointer: the next commit does not sync a new WAL's
// header.
func TestWALTruncatedWhenIdle(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Config{CheckpointIdle: 20 * time.Millisecond})
	mustSession(t, s, "s1")
	for seq := int64(1); seq <= 200; seq++ {
		s.Append(kibEvent(seq))
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush() error = %v", err)
	}
	if walSize(t, s) < 200<<10 {
		t.Fatalf("WAL file holds %d bytes right after 200 KiB of events; want them", walSize(t, s))
	}
	oneFrame := int64(32 + s.ckpt.frameBytes) // the WAL's header and a frame
	waitFor(t, "the WAL file to be truncated and started", func() bool { return walSize(t, s) == oneFrame })
	time.Sleep(100 * time.Millisecond) // five idle periods: it stays so
	if got := walSize(t, s); got != oneFrame {
		t.Fatalf("WAL file holds %d bytes after idle; want %d, a header and one frame", got, oneFrame)
	}
	evs, err := s.Events(ctx, "s1", 0, 1000)
	if err != nil || len(evs) != 200 {
		t.Fatalf("Events(s1) = %d events, %v; want 200", len(evs), err)
	}
	// The next commit appends to that WAL.
	s.Append(kibEvent(201))
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := walSize(t, s); got <= oneFrame {
		t.Errorf("WAL file holds %d bytes after a commit; want more than %d", got, oneFrame)
	}
}

// TestCloseStopsCheckpointer checks that Close stops the checkpointer,
// even while one of its checkpoints waits for a reader, and leaves the
// database whole with no WAL file.
func TestCloseStopsCheckpointer(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	ctx := context.Background()
	path := t.TempDir() + "/agentpool.db"
	s, err := Open(ctx, Config{Path: path, CheckpointIdle: time.Millisecond, CheckpointInterval: time.Millisecond})
	if err != nil {
		t.Fatalf("Open(%q) error = %v", path, err)
	}
	mustSession(t, s, "s1")
	for seq := int64(1); seq <= 100; seq++ {
		s.Append(kibEvent(seq))
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush() error = %v", err)
	}
	// A reader in the middle of a read keeps the idle checkpoint from
	// truncating the WAL, so that it waits for it.
	conn, err := s.db.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.GetContext(ctx, &n, "SELECT COUNT(*) FROM events"); err != nil || n != 100 {
		t.Fatalf("count events = %d, %v; want 100", n, err)
	}
	s.Append(kibEvent(101))
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush() error = %v", err)
	}
	time.Sleep(10 * time.Millisecond) // let the checkpointer try
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := s.Close(); err != nil {
		t.Fatalf("Close() error = %v", err)
	}
	goleak.VerifyNone(t, ignore)
	if _, err := os.Stat(path + "-wal"); !os.IsNotExist(err) {
		t.Errorf("stat WAL after Close: %v; want it removed", err)
	}
	s2, _ := openTest(t, Config{Path: path})
	evs, err := s2.Events(ctx, "s1", 0, 1000)
	if err != nil || len(evs) != 101 {
		t.Fatalf("Events(s1) after reopening = %d events, %v; want 101", len(evs), err)
	}
}
