package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, for another host's connection

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/store/postgres"
)

// TestTwoStoresAppendGapFree: two stores on one PostgreSQL database, as two
// hosts would be, append to the same sessions at once (events without a
// seq of their own) while a reader polls each session after the last seq
// it saw. The seqs stored are 1..n without gap or repeat, every commit
// hook gets the seq its event was stored under, and the reader, which
// never re-reads a seq it passed, sees every event: no event commits
// after a larger seq became visible.
func TestTwoStoresAppendGapFree(t *testing.T) {
	loc := testEngines[1].db(t, Config{})
	ctx := context.Background()
	a, _ := openTest(t, at(loc, Config{BatchSize: 16}))
	b, _ := openTest(t, at(loc, Config{BatchSize: 16}))
	sessions := []string{"s1", "s2", "s3"}
	for _, id := range sessions {
		mustSession(t, a, id)
	}
	const appenders, perAppender = 4, 150 // per store and session
	total := 2 * appenders * perAppender

	var hookMu sync.Mutex
	hooked := map[string]map[int64]string{} // session -> seq -> payload
	hook := func(ev backends.Event) {
		hookMu.Lock()
		defer hookMu.Unlock()
		if hooked[ev.Session] == nil {
			hooked[ev.Session] = map[int64]string{}
		}
		if prev, dup := hooked[ev.Session][ev.Seq]; dup {
			t.Errorf("commit hooks for %s seq %d: %s and %s", ev.Session, ev.Seq, prev, ev.Data)
		}
		hooked[ev.Session][ev.Seq] = string(ev.Data)
	}

	// The readers: one per session, each keeping what it saw.
	stop := make(chan struct{})
	seen := make([][]backends.Event, len(sessions))
	var readers sync.WaitGroup
	for i, id := range sessions {
		readers.Add(1)
		go func() {
			defer readers.Done()
			after := int64(0)
			for {
				// Once stop is closed every event has committed: a read
				// begun after it that finds nothing new is the last.
				stopped := false
				select {
				case <-stop:
					stopped = true
				default:
				}
				page, err := b.Events(ctx, id, after, 0)
				if err != nil {
					t.Errorf("Events(%s, %d) error = %v", id, after, err)
					return
				}
				seen[i] = append(seen[i], page...)
				if len(page) > 0 {
					after = page[len(page)-1].Seq
				}
				if stopped && len(page) == 0 {
					return
				}
				time.Sleep(200 * time.Microsecond)
			}
		}()
	}

	var wg sync.WaitGroup
	for si, st := range []*Store{a, b} {
		for w := range appenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range perAppender {
					for _, id := range sessions {
						data := backends.MustJSON(map[string]string{"from": fmt.Sprintf("%d/%d/%d", si, w, n)})
						st.AppendNotify(backends.Event{Session: id, Type: backends.EventMessageChunk, Data: data}, hook)
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, st := range []*Store{a, b} {
		if err := st.Flush(ctx); err != nil {
			t.Fatalf("Flush() error = %v", err)
		}
	}
	close(stop)
	readers.Wait()

	for i, id := range sessions {
		got, err := a.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != total {
			t.Fatalf("Events(%s) = %d events; want %d", id, len(got), total)
		}
		payloads := map[string]bool{}
		for j, ev := range got {
			if ev.Seq != int64(j+1) {
				t.Fatalf("Events(%s)[%d].Seq = %d; want %d (gap-free, unique)", id, j, ev.Seq, j+1)
			}
			if payloads[string(ev.Data)] {
				t.Fatalf("Events(%s): payload %s stored twice", id, ev.Data)
			}
			payloads[string(ev.Data)] = true
			if h := hooked[id][ev.Seq]; h != string(ev.Data) {
				t.Fatalf("commit hook of %s seq %d got %s; stored %s", id, ev.Seq, h, ev.Data)
			}
		}
		for j, ev := range seen[i] {
			if ev.Seq != int64(j+1) {
				t.Fatalf("the reader of %s saw seq %d at %d; want %d: an event committed behind a larger seq", id, ev.Seq, j, j+1)
			}
		}
		if len(seen[i]) != total {
			t.Fatalf("the reader polling %s after its last seq saw %d events; want all %d", id, len(seen[i]), total)
		}
		if next, err := b.NextSeq(ctx, id); err != nil || next != int64(total+1) {
			t.Errorf("NextSeq(%s) = %d, %v; want %d", id, next, err, total+1)
		}
	}
	for _, st := range []*Store{a, b} {
		if s := st.Stats(); s.Dropped != 0 || s.Rejected != 0 {
			t.Errorf("Stats() = %+v; want nothing dropped or rejected", s)
		}
	}
}

// TestPostgresRefusedItemsLeaveTheRestOfTheBatch: PostgreSQL aborts a
// transaction at its first failed statement; items refused for themselves
// (a turn row it cannot store, a turn row or an event of an unknown
// session, a second end of a turn) are left out and the rest of their batch commits, the seqs of a
// session's events staying gap-free, and a turn's end is stored with its
// turn.ended event or not at all.
func TestPostgresRefusedItemsLeaveTheRestOfTheBatch(t *testing.T) {
	loc := testEngines[1].db(t, Config{})
	ctx := context.Background()
	s, logs := openTest(t, at(loc, Config{FlushInterval: 50 * time.Millisecond}))
	mustSession(t, s, "s1")
	n, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "p"})
	if err != nil {
		t.Fatalf("StartTurn(s1) error = %v", err)
	}
	var hooks []int64
	var mu sync.Mutex
	hook := func(ev backends.Event) {
		mu.Lock()
		defer mu.Unlock()
		hooks = append(hooks, ev.Seq)
	}
	now := time.Now()
	s.AppendNotify(testEvent("s1", 1, now), hook)
	s.AppendNotify(testEvent("nope", 1, now), hook) // no session: no counter row
	ended := backends.Event{Session: "s1", Seq: 2, Turn: n, Type: backends.EventTurnEnded, Data: json.RawMessage(`{"turn":1}`)}
	if err := s.EndTurnEvent(ctx, n, TurnEnd{StopReason: "end_turn"}, ended, hook); err != nil {
		t.Fatal(err)
	}
	// A second end of the same turn: its update matches nothing, and its
	// event is not stored.
	again := ended
	again.Seq = 3
	if err := s.EndTurnEvent(ctx, n, TurnEnd{StopReason: "cancelled"}, again, hook); err != nil {
		t.Fatal(err)
	}
	// A turn row that PostgreSQL cannot store (a NUL byte in its text)
	// fails its statement: the transaction is redone without it. One of an
	// unknown session takes no number and is refused too.
	done := make(chan error, 2)
	go func() {
		_, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "a\x00b"})
		done <- err
	}()
	go func() {
		_, err := s.StartTurn(ctx, Turn{SessionID: "nope", Agent: "a", Prompt: "p"})
		done <- err
	}()
	s.AppendNotify(testEvent("s1", 3, now), hook)
	var notFound, refused int
	for range 2 {
		switch err := <-done; {
		case errors.Is(err, ErrNotFound):
			notFound++
		case err != nil:
			refused++
		}
	}
	if notFound != 1 || refused != 1 {
		t.Errorf("StartTurn(NUL in prompt) and StartTurn(unknown session): %d ErrNotFound, %d other errors; want 1 and 1", notFound, refused)
	}
	if n2, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "next"}); err != nil || n2 != n+1 {
		t.Errorf("StartTurn(s1) after the refused ones = %d, %v; want %d (no number lost)", n2, err, n+1)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, ev := range got {
		seqs = append(seqs, ev.Seq)
	}
	if len(got) != 3 || seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 || got[1].Type != backends.EventTurnEnded {
		t.Errorf("Events(s1) seqs = %v (%+v); want 1, 2 (turn.ended), 3", seqs, got)
	}
	if turn, err := s.GetTurn(ctx, "s1", n); err != nil || turn.StopReason != "end_turn" {
		t.Errorf("GetTurn(s1, %d) = %+v, %v; want its first end", n, turn, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(hooks) != "[1 2 3]" {
		t.Errorf("commit hooks got seqs %v; want [1 2 3]", hooks)
	}
	if st := s.Stats(); st.Rejected != 4 || st.Appended != 3 {
		t.Errorf("Stats() = %+v; want 3 appended, 4 rejected\n%s", st, logs)
	}
}

// TestPostgresErrorsMapToTheStoresErrors: PostgreSQL's unique and
// foreign-key violations and its disk full are the store's ErrExists,
// ErrNotFound and ErrFull, as SQLite's are; a full disk on the server
// names no local file.
func TestPostgresErrorsMapToTheStoresErrors(t *testing.T) {
	s := &Store{eng: postgresEngine, cfg: Config{Path: "/home/u/agentpool.db"}}
	tests := []struct {
		code string
		want error
	}{
		{postgres.UniqueViolation, ErrExists},
		{postgres.ForeignKeyViolation, ErrNotFound},
		{postgres.DiskFull, ErrFull},
	}
	for _, tt := range tests {
		err := s.mapWriteErr(fmt.Errorf("insert: %w", &pgconn.PgError{Code: tt.code}))
		if !errors.Is(err, tt.want) {
			t.Errorf("mapWriteErr(SQLSTATE %s) = %v; want %v", tt.code, err, tt.want)
		}
	}
	err := s.mapWriteErr(&pgconn.PgError{Code: postgres.DiskFull})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("mapWriteErr(disk full) = %v; want it to wrap ENOSPC", err)
	}
	var dp interface{ DiskPath() string }
	if errors.As(err, &dp) && dp.DiskPath() != "" {
		t.Errorf("disk full on the server names local file %q; want none", dp.DiskPath())
	}
	if !refusesEvent(&pgconn.PgError{Code: "23514"}) || refusesEvent(&pgconn.PgError{Code: "40001"}) {
		t.Error("refusesEvent: want a check violation refused for itself and a serialization failure retried")
	}
}

// TestPostgresPasswordRules: a URL or DSN carrying a password is refused
// (before any connection), and so is a password file that group or others
// may read.
func TestPostgresPasswordRules(t *testing.T) {
	ctx := context.Background()
	for _, url := range []string{
		"postgres://u:secret@127.0.0.1/db",
		"postgresql://u@127.0.0.1/db?password=secret",
		"host=127.0.0.1 user=u password=secret dbname=db",
		"password=secret host=127.0.0.1",
	} {
		if _, err := Open(ctx, Config{URL: url}); !errors.Is(err, ErrPasswordInURL) {
			t.Errorf("Open(%q) error = %v; want ErrPasswordInURL", url, err)
		}
	}
	for _, url := range []string{"postgres://u@127.0.0.1/db", "host=127.0.0.1 user=u dbname=db", "postgres://127.0.0.1/db?user=passwordless"} {
		if HasPassword(url) {
			t.Errorf("HasPassword(%q) = true; want false", url)
		}
	}
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("secret\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, Config{URL: "postgres://u@127.0.0.1:1/db", PasswordFile: loose}); !errors.Is(err, ErrPasswordFileMode) {
		t.Errorf("Open(password file 0640) error = %v; want ErrPasswordFileMode", err)
	}
}

// TestPostgresEventRefusedInAMultiRowInsert: PostgreSQL takes a batch's
// events in one statement; an event it refuses (text with a NUL byte,
// which PostgreSQL cannot store) fails that statement, and the batch is
// written again one event at a time, without it, the others keeping
// gap-free seqs.
func TestPostgresEventRefusedInAMultiRowInsert(t *testing.T) {
	loc := testEngines[1].db(t, Config{})
	ctx := context.Background()
	s, _ := openTest(t, at(loc, Config{FlushInterval: time.Hour}))
	mustSession(t, s, "s1")
	now := time.Now()
	bad := testEvent("s1", 2, now)
	bad.Data = json.RawMessage("{\"text\":\"a\x00b\"}")
	for _, ev := range []backends.Event{testEvent("s1", 1, now), bad, testEvent("s1", 0, now), testEvent("s1", 0, now)} {
		s.Append(ev)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Seq != 1 || got[1].Seq != 2 || got[2].Seq != 3 {
		t.Errorf("Events(s1) = %+v; want seqs 1, 2, 3 without the refused event", got)
	}
	if st := s.Stats(); st.Appended != 3 || st.Rejected != 1 || st.Retries != 0 {
		t.Errorf("Stats() = %+v; want 3 appended, 1 rejected, no retry", st)
	}
}

// TestEnginesAttemptSetsOpenTurnsAndLossReports covers, on both engines,
// what the other tests do not reach: attempt sets, the open turns a
// previous daemon left and their end, and the report of events lost at the
// last Close, stored after the lost seqs and never twice.
func TestEnginesAttemptSetsOpenTurnsAndLossReports(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		ctx := context.Background()
		loc := e.db(t, Config{})
		if e.postgres {
			loc.Path = filepath.Join(t.TempDir(), "postgres") // places the loss log
		}
		s, _ := openTest(t, at(loc, Config{}))
		mustSession(t, s, "s1")
		created := time.Unix(100, 0)
		for _, id := range []string{"b", "a"} {
			if err := s.SaveAttemptSet(ctx, id, created, []byte(`{"id":"`+id+`"}`)); err != nil {
				t.Fatalf("SaveAttemptSet(%s) error = %v", id, err)
			}
		}
		if err := s.SaveAttemptSet(ctx, "a", created, []byte(`{"id":"a","v":2}`)); err != nil {
			t.Fatal(err)
		}
		if sets, err := s.ListAttemptSets(ctx); err != nil || len(sets) != 2 || string(sets[0]) != `{"id":"a","v":2}` {
			t.Errorf("ListAttemptSets() = %q, %v; want a (updated) then b", sets, err)
		}

		n, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "p"})
		if err != nil {
			t.Fatal(err)
		}
		if open, err := s.OpenTurns(ctx); err != nil || len(open) != 1 || open[0].Number != n {
			t.Errorf("OpenTurns() = %+v, %v; want turn %d", open, err, n)
		}
		if ended, err := s.EndOpenTurns(ctx, "daemon stopped"); err != nil || ended != 1 {
			t.Errorf("EndOpenTurns() = %d, %v; want 1", ended, err)
		}
		for seq := int64(1); seq <= 3; seq++ {
			s.Append(testEvent("s1", seq, time.Now()))
		}
		// Seqs 4 to 6 were handed out and lost at Close.
		for seq := int64(4); seq <= 6; seq++ {
			s.lost.add(testEvent("s1", seq, time.Now()))
		}
		s.Close()

		for range 2 { // reported once, whatever the number of opens
			s2, _ := openTest(t, at(loc, Config{}))
			if err := s2.Close(); err != nil {
				t.Fatalf("Close() error = %v", err)
			}
		}
		s3, _ := openTest(t, at(loc, Config{}))
		got, err := s3.Events(ctx, "s1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 || got[3].Seq != 7 || got[3].Type != backends.EventError {
			t.Fatalf("Events(s1) = %+v; want 1..3 and the loss report at 7", got)
		}
		if next, err := s3.NextSeq(ctx, "s1"); err != nil || next != 8 {
			t.Errorf("NextSeq(s1) = %d, %v; want 8", next, err)
		}
	})
}

// TestPostgresDeliveryFollowsCommit: while another connection (another
// host) holds the session's row, the writer cannot allocate the seqs of
// its events and nothing is delivered; once released, every event is
// delivered once, in append order, and is readable when it is.
func TestPostgresDeliveryFollowsCommit(t *testing.T) {
	loc := testEngines[1].db(t, Config{})
	ctx := context.Background()
	s, _ := openTest(t, at(loc, Config{}))
	mustSession(t, s, "s1")
	l := &committedLog{t: t, s: s}

	other, err := sql.Open("pgx", loc.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM sessions WHERE id = 's1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var want []int64
	for seq := int64(1); seq <= 20; seq++ {
		s.AppendNotify(testEvent("s1", seq, time.Now()), l.hook)
		want = append(want, seq)
	}
	fctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = s.Flush(fctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush() while the row is held = %v; want the deadline", err)
	}
	if n := l.len(); n != 0 {
		t.Fatalf("%d events delivered while the writer could not commit; want 0", n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var got []int64
	for _, ev := range l.seen {
		got = append(got, ev.Seq)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("delivered seqs %v; want %v", got, want)
	}
}

// TestTwoStoresStartTurnsOfOneSession: turns of one session started at
// once through two stores on one PostgreSQL database all start, numbered
// 1..n without gap or repeat.
func TestTwoStoresStartTurnsOfOneSession(t *testing.T) {
	loc := testEngines[1].db(t, Config{})
	ctx := context.Background()
	a, _ := openTest(t, at(loc, Config{}))
	b, _ := openTest(t, at(loc, Config{}))
	mustSession(t, a, "s1")
	const perStore = 40
	var wg sync.WaitGroup
	numbers := make(chan int64, 2*perStore)
	for _, st := range []*Store{a, b} {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perStore / 4 {
					n, err := st.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "p"})
					if err != nil {
						t.Errorf("StartTurn(s1) error = %v", err)
						return
					}
					numbers <- n
				}
			}()
		}
	}
	wg.Wait()
	close(numbers)
	seen := map[int64]bool{}
	for n := range numbers {
		if seen[n] || n < 1 || n > 2*perStore {
			t.Errorf("turn number %d repeated or out of 1..%d", n, 2*perStore)
		}
		seen[n] = true
	}
	if len(seen) != 2*perStore {
		t.Errorf("%d turns started; want %d", len(seen), 2*perStore)
	}
	if last, err := b.LastTurn(ctx, "s1"); err != nil || last.Number != 2*perStore {
		t.Errorf("LastTurn(s1) = %+v, %v; want number %d", last, err, 2*perStore)
	}
}

// TestPostgresConnectionsAreKept: bursts of concurrent reads, far more
// than PostgresConns, open at most PostgresConns connections, and the
// next burst reuses them instead of starting new server processes.
func TestPostgresConnectionsAreKept(t *testing.T) {
	loc := testEngines[1].db(t, Config{})
	ctx := context.Background()
	s, _ := openTest(t, at(loc, Config{}))
	mustSession(t, s, "s1")
	var dbName string
	if err := s.db.GetContext(ctx, &dbName, `SELECT current_database()`); err != nil {
		t.Fatal(err)
	}
	// Backends started for this database so far (PostgreSQL 14+).
	started := func() int64 {
		var n int64
		if err := s.db.GetContext(ctx, &n, `SELECT sessions FROM pg_stat_database WHERE datname = ?`, dbName); err != nil {
			t.Fatal(err)
		}
		return n
	}
	burst := func() {
		var wg sync.WaitGroup
		for range 4 * PostgresConns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Long enough that the reads overlap.
				if _, err := s.db.ExecContext(ctx, `SELECT pg_sleep(0.02)`); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	burst()
	if open := s.db.Stats().OpenConnections; open > PostgresConns {
		t.Errorf("%d connections open after a burst; want at most %d", open, PostgresConns)
	}
	// The statistics collector reports the sessions a backend ended.
	before := started()
	for range 3 {
		burst()
	}
	if after := started(); after != before {
		t.Errorf("three more bursts started %d server processes; want the connections kept and reused", after-before)
	}
}

// Config.MaxConns caps the store's PostgreSQL connections; too few for
// the writer and the reads that wait for it is refused, with the least.
func TestPostgresMaxConns(t *testing.T) {
	pg := testEngines[1]
	for _, tc := range []struct{ set, want int }{{0, PostgresConns}, {MinPostgresConns, MinPostgresConns}, {40, 40}} {
		s, _ := openTest(t, pg.db(t, Config{MaxConns: tc.set}))
		if got := s.db.Stats().MaxOpenConnections; got != tc.want {
			t.Errorf("MaxConns %d: %d connections at most; want %d", tc.set, got, tc.want)
		}
		// Sessions and their events go through the writer while reads
		// take the other connections.
		mustSession(t, s, "s1")
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Open(context.Background(), pg.db(t, Config{MaxConns: MinPostgresConns - 1}))
	if err == nil || !strings.Contains(err.Error(), "at least 4") {
		t.Errorf("Open with %d connections error = %v; want one saying at least %d", MinPostgresConns-1, err, MinPostgresConns)
	}
}
