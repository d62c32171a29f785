package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// roundTripProxy relays PostgreSQL connections from a socket of its own
// to the test cluster's, counting round trips: each time a connection's
// client sends after the server answered it.
type roundTripProxy struct {
	dir   string // holds the proxy's .s.PGSQL.5432
	trips atomic.Int64
	wg    sync.WaitGroup
	// delay, when set, holds each answer of the server this long: a
	// server on another host.
	delay time.Duration
	// cutAtCommit, when set, is cleared at the next answer of the server
	// that says a COMMIT completed: the proxy closes that connection
	// instead of passing the answer on, so that the transaction committed
	// and the client does not know.
	cutAtCommit atomic.Bool
	cuts        atomic.Int64
	// loseAfterBegin, when set, is cleared once a BEGIN completes: the
	// client's next message on that connection
	// never reaches the server, the client's connection is closed, and
	// the server's is kept open, its transaction too, as a link that went
	// down without a word leaves it.
	loseAfterBegin atomic.Bool
	lost           atomic.Int64
}

// startRoundTripProxy relays to the server that rawURL (a pgtest URL,
// host= the socket's directory) names, and returns the URL to reach it
// through the proxy.
func startRoundTripProxy(t testing.TB, rawURL string) (*roundTripProxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	target := filepath.Join(q.Get("host"), ".s.PGSQL."+q.Get("port"))
	p := &roundTripProxy{dir: t.TempDir()}
	ln, err := net.Listen("unix", filepath.Join(p.dir, ".s.PGSQL."+q.Get("port")))
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.Map
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			conns.Store(c, s)
			p.relay(c, s)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, s any) bool {
			c.(net.Conn).Close()
			s.(net.Conn).Close()
			return true
		})
		p.wg.Wait()
	})
	q.Set("host", p.dir)
	u.RawQuery = q.Encode()
	return p, u.String()
}

// relay copies between client c and server s until either ends.
func (p *roundTripProxy) relay(c, s net.Conn) {
	var answered atomic.Bool // the server sent since the client last did
	answered.Store(true)     // the client's first message is a trip
	var loseNext atomic.Bool // the client's next message is lost
	copyCounting := func(dst, src net.Conn, fromClient bool) {
		defer p.wg.Done()
		keep := false
		defer func() {
			if !keep {
				dst.Close()
			}
		}()
		var answers pgAnswers
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if fromClient {
					if answered.Swap(false) {
						p.trips.Add(1)
					}
					if loseNext.Swap(false) {
						p.lost.Add(1)
						keep = true // the server's side stays open
						c.Close()
						return
					}
				} else {
					commits, begins := answers.commits, answers.begins
					answers.read(buf[:n])
					if answers.begins > begins && p.loseAfterBegin.CompareAndSwap(true, false) {
						loseNext.Store(true)
					}
					if p.delay > 0 {
						time.Sleep(p.delay)
					}
					answered.Store(true)
					if answers.commits > commits && p.cutAtCommit.CompareAndSwap(true, false) {
						// The server committed; the client never learns.
						p.cuts.Add(1)
						return
					}
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	p.wg.Add(2)
	go copyCounting(s, c, true)
	go copyCounting(c, s, false)
}

// pgAnswers follows the messages a server sends, to count the COMMITs
// and BEGINs it completed.
type pgAnswers struct {
	buf             []byte
	commits, begins int // COMMITs and BEGINs completed
}

// read reads the messages in b.
func (a *pgAnswers) read(b []byte) {
	a.buf = append(a.buf, b...)
	for len(a.buf) >= 5 {
		n := int(binary.BigEndian.Uint32(a.buf[1:])) + 1
		if len(a.buf) < n {
			break
		}
		body := a.buf[5:n]
		switch a.buf[0] {
		case 'C':
			switch string(bytes.TrimRight(body, "\x00")) {
			case "COMMIT":
				a.commits++
			case "BEGIN":
				a.begins++
			}
		}
		a.buf = a.buf[n:]
	}
}

// TestPostgresWriterRoundTrips: on PostgreSQL a transaction of the writer
// is two round trips to the server, whatever it holds, plus one when it
// holds a write whose answer the writer checks (a turn's end must change
// its row): BEGIN goes with the lock of the seq counters, and the inserts,
// the turn rows, the counters' update and the COMMIT go together. A
// statement a round trip (as database/sql runs them) made a burst of 20
// turn ends 40 round trips more, each a wait for the CPU on a loaded host.
func TestPostgresWriterRoundTrips(t *testing.T) {
	loc := testEngines[1].db(t, Config{})
	proxy, viaProxy := startRoundTripProxy(t, loc.URL)
	ctx := context.Background()

	type txTrips struct {
		items, ends int
		trips       int64
	}
	var (
		mu       sync.Mutex
		txs      []txTrips
		startAt  int64
		gate     = make(chan struct{})
		gateHeld = make(chan struct{})
		holding  atomic.Bool
	)
	cfg := Config{URL: viaProxy}
	cfg.trace = func(step traceStep, items []item) {
		switch step {
		case stepBegin:
			if holding.CompareAndSwap(true, false) {
				close(gateHeld)
				<-gate
			}
			startAt = proxy.trips.Load()
		case stepCommitted:
			ends := 0
			for i := range items {
				if items[i].w != nil {
					ends++
				}
			}
			mu.Lock()
			txs = append(txs, txTrips{items: len(items), ends: ends, trips: proxy.trips.Load() - startAt})
			mu.Unlock()
		}
	}
	s, _ := openTest(t, cfg)
	const sessions = 20
	for i := range sessions {
		mustSession(t, s, fmt.Sprintf("s%02d", i))
	}
	seq := int64(0)

	// burst holds the writer in the transaction of one event while queue
	// queues more, then lets it write them. It returns the transactions
	// after the held one.
	burst := func(queue func()) []txTrips {
		t.Helper()
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		txs = nil
		mu.Unlock()
		gate, gateHeld = make(chan struct{}), make(chan struct{})
		holding.Store(true)
		seq++
		s.Append(testEvent("s00", seq, time.Now()))
		<-gateHeld
		queue()
		close(gate)
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]txTrips(nil), txs[1:]...)
	}
	// A chunk of each session, five times. The first round warms the
	// connections' statement caches: a statement new to a connection
	// costs pgx a round trip to prepare it.
	for round := range 2 {
		got := burst(func() {
			seq++
			for range 5 {
				for i := range sessions {
					s.Append(testEvent(fmt.Sprintf("s%02d", i), seq, time.Now()))
				}
				seq++
			}
		})
		events := 0
		for _, tx := range got {
			events += tx.items
			if tx.trips > 2 && round > 0 {
				t.Errorf("a transaction of %d events took %d round trips; want at most 2 (all: %+v)", tx.items, tx.trips, got)
			}
		}
		if events != 5*sessions {
			t.Errorf("the writer wrote %d items in %+v; want %d", events, got, 5*sessions)
		}
	}

	// Every turn ending, after a chunk; twice, as above.
	for round := range 2 {
		turns := startTurns(t, s, "s%02d", sessions)
		got := burst(func() {
			seq++
			for i := range sessions {
				id := fmt.Sprintf("s%02d", i)
				s.Append(testEvent(id, seq, time.Now()))
				ended := backends.Event{Session: id, Seq: seq + 1, Turn: turns[i], Type: backends.EventTurnEnded}
				if err := s.EndTurnEvent(ctx, turns[i], TurnEnd{StopReason: "end_turn"}, ended, nil); err != nil {
					t.Fatal(err)
				}
			}
			seq++
		})
		ends := 0
		for _, tx := range got {
			ends += tx.ends
			if max := int64(2); round > 0 && tx.trips > max && (tx.ends == 0 || tx.trips > max+1) {
				t.Errorf("a transaction of %d items, %d of them turn ends, took %d round trips; want at most 2, 3 with turn ends (all: %+v)",
					tx.items, tx.ends, tx.trips, got)
			}
		}
		if ends != sessions {
			t.Errorf("the writer wrote %d turn ends in %+v; want %d", ends, got, sessions)
		}
		for i := range sessions {
			turn, err := s.GetTurn(ctx, fmt.Sprintf("s%02d", i), turns[i])
			if err != nil || turn.StopReason != "end_turn" {
				t.Errorf("turn %d of s%02d = %+v, %v; want ended", turns[i], i, turn, err)
			}
		}
	}
}

// BenchmarkPostgresWriter measures the writer on a PostgreSQL server
// reached through a link with the round-trip time given (0: the local
// socket; 500µs: a server on another host of the same network), in the
// two shapes of its load: a burst of 100 sessions each ending its turn
// after a chunk (ms per burst, from the first item queued to all
// committed), and a steady stream of one producer (events/s). It reports
// the round trips per transaction.
func BenchmarkPostgresWriter(b *testing.B) {
	for _, rtt := range []time.Duration{0, 500 * time.Microsecond} {
		b.Run(fmt.Sprintf("rtt=%v", rtt), func(b *testing.B) {
			proxy, viaProxy := startRoundTripProxy(b, pgCluster.Database(b))
			proxy.delay = rtt
			var txs atomic.Int64
			cfg := Config{URL: viaProxy, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			cfg.trace = func(step traceStep, _ []item) {
				if step == stepCommitted {
					txs.Add(1)
				}
			}
			s, err := Open(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			ctx := context.Background()
			const sessions = 100
			for i := range sessions {
				mustSession(b, s, fmt.Sprintf("s%03d", i))
			}
			seqs := make([]int64, sessions)
			var burst []time.Duration
			trips0, txs0 := proxy.trips.Load(), txs.Load()
			for range b.N {
				turns := startTurns(b, s, "s%03d", sessions)
				start := time.Now()
				for i := range sessions {
					id := fmt.Sprintf("s%03d", i)
					seqs[i]++
					s.Append(benchEvent(id, seqs[i]))
					seqs[i]++
					ended := backends.Event{Session: id, Seq: seqs[i], Turn: turns[i], Type: backends.EventTurnEnded}
					if err := s.EndTurnEvent(ctx, turns[i], TurnEnd{StopReason: "end_turn"}, ended, nil); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				burst = append(burst, time.Since(start))
			}
			trips1, txs1 := proxy.trips.Load(), txs.Load()
			const steady = 20000
			start := time.Now()
			for range steady {
				seqs[0]++
				s.Append(benchEvent("s000", seqs[0]))
			}
			if err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			rate := steady / time.Since(start).Seconds()
			slices.Sort(burst)
			b.ReportMetric(float64(burst[len(burst)/2])/float64(time.Millisecond), "burst_p50_ms")
			b.ReportMetric(rate, "steady_events/s")
			b.ReportMetric(float64(trips1-trips0)/float64(max(txs1-txs0, 1)), "trips/tx_incl_starts")
			if st := s.Stats(); st.Rejected != 0 {
				b.Fatalf("Stats() = %+v; want nothing rejected", st)
			}
		})
	}
}

// TestPostgresWriterSurvivesKilledConnections: the server ends the
// writer's connections (pg_terminate_backend, as an administrator or a
// failover of the server would) 30 times while a turn streams and ends: the writer retries on a new connection, and every event, the turn
// end with it, is stored once, in order, none dropped.
func TestPostgresWriterSurvivesKilledConnections(t *testing.T) {
	loc := testEngines[1].db(t, Config{})
	ctx := context.Background()
	s, _ := openTest(t, at(loc, Config{RetryBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}))
	mustSession(t, s, "s1")
	n, err := s.StartTurn(ctx, Turn{SessionID: "s1", Agent: "a", Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := Open(ctx, Config{URL: loc.URL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	stop := make(chan struct{})
	killed := make(chan int)
	go func() {
		kills := 0
		defer func() { killed <- kills }()
		for range 30 {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			var k int
			if err := admin.db.GetContext(ctx, &k, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`); err == nil {
				kills += k
			}
		}
	}()
	const events = 3000
	for i := 1; i <= events; i++ {
		if err := s.WaitRoom(ctx, "s1"); err != nil {
			t.Fatal(err)
		}
		s.Append(testEvent("s1", int64(i), time.Now()))
	}
	ended := backends.Event{Session: "s1", Seq: events + 1, Turn: n, Type: backends.EventTurnEnded}
	if err := s.EndTurnEvent(ctx, n, TurnEnd{StopReason: "end_turn"}, ended, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	kills := <-killed
	// The checks read through the pool, some of whose connections the
	// server ended while they sat idle: they are dropped, not used.
	got, err := s.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range got {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d; want %d (gap-free, each once)", i, ev.Seq, i+1)
		}
	}
	if len(got) != events+1 || got[events].Type != backends.EventTurnEnded {
		t.Errorf("stored %d events; want %d, the last turn.ended", len(got), events+1)
	}
	if turn, err := s.GetTurn(ctx, "s1", n); err != nil || turn.StopReason != "end_turn" {
		t.Errorf("GetTurn = %+v, %v; want it ended", turn, err)
	}
	st := s.Stats()
	if st.Dropped != 0 || st.Rejected != 0 {
		t.Errorf("Stats() = %+v; want nothing dropped or rejected", st)
	}
	if kills == 0 || st.Retries == 0 {
		t.Errorf("%d connections ended, %d retries; the test did not interrupt the writer", kills, st.Retries)
	}
	t.Logf("%d connections ended by the server, %d retries, %d batches", kills, st.Retries, st.Batches)
}

// TestPostgresWriterAsksWhetherALostCommitCommitted: the connection is
// lost once the server has committed the writer's transaction and before
// its answer reaches the writer. The transaction did commit: the writer asks the
// server (txid_status) instead of writing the batch again, which would
// store every event of it twice, under new seqs. Each event is stored and
// delivered once.
func TestPostgresWriterAsksWhetherALostCommitCommitted(t *testing.T) {
	loc := testEngines[1].db(t, Config{})
	proxy, viaProxy := startRoundTripProxy(t, loc.URL)
	ctx := context.Background()
	s, logs := openTest(t, Config{URL: viaProxy, RetryBackoff: time.Millisecond})
	mustSession(t, s, "s1")
	var delivered seqHook
	for round := range 2 {
		proxy.cutAtCommit.Store(true)
		for i := 1; i <= 10; i++ {
			s.AppendNotify(testEvent("s1", int64(round*10+i), time.Now()), delivered.hook)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if proxy.cutAtCommit.Load() {
			t.Fatalf("round %d: no COMMIT went through the proxy", round)
		}
	}
	checkEachOnce(t, s, "s1", 20, &delivered, logs)
	if st := s.Stats(); st.Appended != 20 || st.Dropped != 0 || st.Rejected != 0 {
		t.Errorf("Stats() = %+v; want 20 appended, none dropped or rejected\n%s", st, logs)
	}
	if n := strings.Count(logs.String(), "COMMIT had no answer committed"); n != 2 || proxy.cuts.Load() != 2 {
		t.Errorf("%d lost answers, %d found committed; want 2 and 2\n%s", proxy.cuts.Load(), n, logs)
	}
}

// TestPostgresWriterEndsATransactionLeftOpen: the link to the server goes
// down between a transaction's BEGIN and its COMMIT without the server
// noticing: the writer's COMMIT never arrives, and the server holds the
// transaction open, with the lock of the session's seq counter. Asked
// whether it committed, the server says it is in progress: the writer
// ends it (pg_terminate_backend), learns that it aborted, and writes the
// batch again. Each event is stored and delivered once.
func TestPostgresWriterEndsATransactionLeftOpen(t *testing.T) {
	loc := testEngines[1].db(t, Config{})
	proxy, viaProxy := startRoundTripProxy(t, loc.URL)
	ctx := context.Background()
	s, logs := openTest(t, Config{URL: viaProxy, RetryBackoff: time.Millisecond})
	mustSession(t, s, "s1")
	var delivered seqHook
	proxy.loseAfterBegin.Store(true)
	for i := 1; i <= 10; i++ {
		s.AppendNotify(testEvent("s1", int64(i), time.Now()), delivered.hook)
	}
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := s.Flush(fctx); err != nil {
		t.Fatalf("Flush: %v (the writer is stuck on the transaction left open)\n%s", err, logs)
	}
	if proxy.lost.Load() != 1 {
		t.Fatalf("%d messages lost; want 1", proxy.lost.Load())
	}
	checkEachOnce(t, s, "s1", 10, &delivered, logs)
	if st := s.Stats(); st.Appended != 10 || st.Retries == 0 || st.Dropped != 0 {
		t.Errorf("Stats() = %+v; want 10 appended after a retry\n%s", st, logs)
	}
	if !strings.Contains(logs.String(), "no answer to its COMMIT") {
		t.Errorf("the writer did not see its COMMIT go unanswered\n%s", logs)
	}
	var open int
	if err := s.db.GetContext(ctx, &open, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND state LIKE 'idle in transaction%'`); err != nil || open != 0 {
		t.Errorf("%d transactions left open (%v); want the writer's ended", open, err)
	}
}

// seqHook is a commit hook that records the seqs it is given.
type seqHook struct {
	mu   sync.Mutex
	seqs []int64
}

func (h *seqHook) hook(ev backends.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seqs = append(h.seqs, ev.Seq)
}

// checkEachOnce checks that session's events are seqs 1 to n, each
// stored once, and that delivered got them in that order.
func checkEachOnce(t *testing.T, s *Store, session string, n int, delivered *seqHook, logs fmt.Stringer) {
	t.Helper()
	want := make([]int64, n)
	for i := range want {
		want[i] = int64(i + 1)
	}
	got, err := s.Events(context.Background(), session, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if seqs := seqsOf(got); !slices.Equal(seqs, want) {
		t.Errorf("stored seqs %v; want 1 to %d, each event once\n%s", seqs, n, logs)
	}
	delivered.mu.Lock()
	defer delivered.mu.Unlock()
	if !slices.Equal(delivered.seqs, want) {
		t.Errorf("delivered seqs %v; want 1 to %d", delivered.seqs, n)
	}
}

// startTurns starts a turn in each of the n sessions named by format
// (fmt.Sprintf(format, i)) and returns their numbers.
func startTurns(tb testing.TB, s *Store, format string, n int) []int64 {
	tb.Helper()
	turns := make([]int64, n)
	for i := range n {
		t, err := s.StartTurn(context.Background(), Turn{SessionID: fmt.Sprintf(format, i), Agent: "a", Prompt: "p"})
		if err != nil {
			tb.Fatal(err)
		}
		turns[i] = t
	}
	return turns
}

// TestPostgresReadsSurviveIdleConnectionsEnded: connections the server
// ends while they sit idle in the pool (a restart, an administrator, a
// failover) are dropped when next taken, not handed to a read that then
// fails: reads made right after, before pgx's ping of connections idle a
// second, all succeed.
func TestPostgresReadsSurviveIdleConnectionsEnded(t *testing.T) {
	loc := testEngines[1].db(t, Config{})
	ctx := context.Background()
	s, _ := openTest(t, loc)
	mustSession(t, s, "s1")
	admin, err := Open(ctx, Config{URL: loc.URL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	readAll := func(round int) {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.GetSession(ctx, "s1"); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: read after the server ended idle connections: %v", round, err)
		}
	}
	for round := range 3 {
		readAll(round) // fills the pool with idle connections
		if n := s.db.Stats().Idle; n < 2 {
			t.Fatalf("%d idle connections in the pool; want several", n)
		}
		var k int
		if err := admin.db.GetContext(ctx, &k, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`); err != nil || k == 0 {
			t.Fatalf("ended %d connections: %v", k, err)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			var left int
			if err := admin.db.GetContext(ctx, &left, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`); err != nil {
				t.Fatal(err)
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d connections still there", left)
			}
		}
		readAll(round)
	}
}
