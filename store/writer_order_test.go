package store

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// progress counts a position settled only once every position before it
// has: items settled out of queue order wait in ahead.
func TestProgressSettlesOutOfOrder(t *testing.T) {
	p := progress{changed: make(chan struct{})}
	at := func(pos ...int64) []item {
		out := make([]item, len(pos))
		for i, v := range pos {
			out[i].pos = v
		}
		return out
	}
	p.settle(at(2, 3))
	if got := p.done(); got != 0 {
		t.Fatalf("after settling 2 and 3, done = %d; want 0 (1 is unsettled)", got)
	}
	if ok, _ := p.reached(2); ok {
		t.Fatal("reached(2) before 1 settled")
	}
	p.settle(at(5))
	p.settle(at(1))
	if got := p.done(); got != 3 {
		t.Fatalf("after settling 1, done = %d; want 3", got)
	}
	p.settle(at(4))
	if got := p.done(); got != 5 || len(p.ahead) != 0 {
		t.Fatalf("after settling 4, done = %d with %d ahead; want 5 and none", got, len(p.ahead))
	}
}

// transactions records the sessions of each transaction the store begins;
// when hold is set, the writer waits in the first transaction that holds
// an event of session hold until release is closed.
type transactions struct {
	mu      sync.Mutex
	txs     [][]string
	hold    string
	held    chan struct{} // closed when the writer waits
	waited  bool
	release chan struct{}
}

func newTransactions(hold string) *transactions {
	return &transactions{hold: hold, held: make(chan struct{}), release: make(chan struct{})}
}

func (r *transactions) trace(step traceStep, items []item) {
	if step != stepBegin {
		return
	}
	var ss []string
	holding := false
	for i := range items {
		ss = append(ss, items[i].session())
		holding = holding || r.hold != "" && items[i].w == nil && items[i].session() == r.hold
	}
	r.mu.Lock()
	r.txs = append(r.txs, ss)
	first := holding && !r.waited
	r.waited = r.waited || first
	r.mu.Unlock()
	if first {
		close(r.held)
		<-r.release
	}
}

func (r *transactions) list() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.txs)
}

// A light session's write queued while the writer commits the first of
// several transactions of another session's megabytes is written next,
// not after all of them; AwaitDelivery returns on its delivery, while a
// Flush made at the same time waits for the megabytes too.
func TestLightWriteWaitsForOneHeavyTransaction(t *testing.T) {
	const size = 1 << 20
	ctx := context.Background()
	rec := newTransactions("flood")
	cfg := fastRetry("")
	cfg.BatchBytes = size
	cfg.trace = rec.trace
	s, _ := openTest(t, cfg)
	mustSession(t, s, "flood")
	mustSession(t, s, "quick")
	for seq := int64(1); seq <= 4; seq++ {
		s.Append(bigEvent("flood", seq, size))
	}
	<-rec.held // the writer is in the flood's first transaction, the rest taken
	delivered := make(chan struct{})
	var once sync.Once
	s.AppendNotify(testEvent("quick", 1, time.Now()), func(backends.Event) { once.Do(func() { close(delivered) }) })
	awaited := make(chan error, 1)
	go func() { awaited <- s.AwaitDelivery(ctx, delivered) }()
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(ctx) }()
	time.Sleep(20 * time.Millisecond) // let the write and the waits queue up
	close(rec.release)
	if err := <-awaited; err != nil {
		t.Fatalf("AwaitDelivery() = %v", err)
	}
	select {
	case <-delivered:
	default:
		t.Fatal("AwaitDelivery returned before the delivery")
	}
	if err := <-flushed; err != nil {
		t.Fatalf("Flush() = %v", err)
	}
	txs := rec.list()
	var order []string
	for _, tx := range txs {
		if len(tx) == 1 && tx[0] == "quick" || len(tx) == 1 && tx[0] == "flood" {
			order = append(order, tx[0])
		}
	}
	// The session rows are written first; then one flood transaction,
	// the quick event, the other three.
	want := []string{"flood", "quick", "flood", "flood", "flood"}
	if !slices.Equal(order[len(order)-5:], want) {
		t.Errorf("transactions = %v; want the quick event second among %v", txs, want)
	}
	evs, err := s.Events(ctx, "flood", 0, 0)
	if err != nil || !slices.Equal(seqsOf(evs), []int64{1, 2, 3, 4}) {
		t.Errorf("flood events = %v, %v; want 1..4 in order", seqsOf(evs), err)
	}
	if st := s.Stats(); st.Pending != 0 {
		t.Errorf("Stats().Pending = %d after Flush; want 0", st.Pending)
	}
}

// While the checkpointer restarts the WAL (quiet), heavy sessions' items
// are left queued, each session's in order, and light ones are written;
// they follow once it ends. Flush waits for the items left.
func TestQuietRestartLeavesHeavyItemsQueued(t *testing.T) {
	const size = 512 << 10
	ctx := context.Background()
	rec := newTransactions("")
	cfg := fastRetry("")
	cfg.BatchBytes = 1 << 20
	cfg.trace = rec.trace
	s, _ := openTest(t, cfg)
	mustSession(t, s, "flood")
	mustSession(t, s, "quick")
	s.ckpt.quiet.Store(true)
	for seq := int64(1); seq <= 3; seq++ {
		s.Append(bigEvent("flood", seq, size))
	}
	s.Append(testEvent("quick", 1, time.Now()))
	waitFor(t, "the quick event", func() bool {
		evs, err := s.Events(ctx, "quick", 0, 0)
		return err == nil && len(evs) == 1
	})
	fctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := s.Flush(fctx)
	cancel()
	if err == nil {
		t.Fatal("Flush returned while the flood's items were left queued")
	}
	if evs, _ := s.Events(ctx, "flood", 0, 0); len(evs) != 0 {
		t.Fatalf("%d flood events written during the restart; want none", len(evs))
	}
	// A small event of the flooding session waits behind its big ones.
	s.Append(testEvent("flood", 4, time.Now()))
	s.ckpt.quiet.Store(false)
	poke(s.ckpt.resume)
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush() after the restart = %v", err)
	}
	evs, err := s.Events(ctx, "flood", 0, 0)
	if err != nil || !slices.Equal(seqsOf(evs), []int64{1, 2, 3, 4}) {
		t.Errorf("flood events = %v, %v; want 1..4 in order", seqsOf(evs), err)
	}
}
