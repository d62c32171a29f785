package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// fairItem is an event item of session, seq and size bytes of Data.
func fairItem(session string, seq int64, size int) item {
	ev := bigEvent(session, seq, size)
	ev.Data = make(json.RawMessage, size)
	return item{ev: ev}
}

// names returns the items as "session:seq" ("|" for a write about no one
// session).
func names(items []item) []string {
	var out []string
	for i := range items {
		it := &items[i]
		if it.session() == "" {
			out = append(out, "|")
			continue
		}
		out = append(out, fmt.Sprintf("%s:%d", it.ev.Session, it.ev.Seq))
	}
	return out
}

func mustPush(t *testing.T, q *queue, it item) {
	t.Helper()
	if _, err := q.push(it, -1); err != nil {
		t.Fatal(err)
	}
}

// A transaction holds at most its bytes and its count of items, one
// bigger item alone.
func TestTakeBatchBoundsBytesAndItems(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		sizes []int
		size  int
		want  int
	}{
		{[]int{mib, mib, mib, mib, mib}, 256, 3}, // 3 MiB and their slots fit in 3.5 MiB
		{[]int{8 * mib, 1}, 256, 1},              // a big one goes alone
		{[]int{1, 8 * mib}, 256, 1},              // and not with the one before
		{[]int{10, 10, 10}, 2, 2},                // the count still counts
	} {
		q := newQueue(1<<16, c.size, 64*mib)
		for i, n := range c.sizes {
			mustPush(t, q, fairItem("a", int64(i+1), n))
		}
		if got := q.takeBatch(nil, c.size, 3*mib+mib/2, false); len(got) != c.want {
			t.Errorf("takeBatch(%v, %d) = %d items; want %d", c.sizes, c.size, len(got), c.want)
		}
	}
}

// takeAll takes every batch from q, and returns them.
func takeAll(q *queue, size int, maxBytes int64) [][]item {
	var out [][]item
	for {
		b := q.takeBatch(nil, size, maxBytes, false)
		if len(b) == 0 {
			return out
		}
		out = append(out, b)
	}
}

// The writer takes a light session's items before a heavy one's, in a
// transaction of their own, and heavy sessions round-robin, each in its
// order; nothing passes a write about no one session.
func TestTakeBatchIsFairAcrossSessions(t *testing.T) {
	const size, maxBytes = 32, 1 << 20
	q := newQueue(1<<16, size, 64<<20)
	// A flood of 200 small items, then another of 100, then a light
	// session's 2, then a barrier and one more of each.
	for i := range int64(200) {
		mustPush(t, q, fairItem("flood", i+1, 100))
	}
	for i := range int64(100) {
		mustPush(t, q, fairItem("other", i+1, 100))
	}
	mustPush(t, q, fairItem("light", 1, 10))
	mustPush(t, q, fairItem("light", 2, 10))
	mustPush(t, q, item{w: &write{what: "about no one session"}})
	mustPush(t, q, fairItem("light", 3, 10))
	mustPush(t, q, fairItem("flood", 201, 100))

	batches := takeAll(q, size, maxBytes)
	if got := names(batches[0]); !slices.Equal(got, []string{"light:1", "light:2"}) {
		t.Fatalf("first transaction = %v; want the light session's two items alone", got)
	}
	// The floods share the next transactions: each gets size/lightShare
	// items per round.
	second := names(batches[1])
	if len(second) != size {
		t.Fatalf("second transaction has %d items; want %d", len(second), size)
	}
	var flood, other int
	for _, n := range second {
		switch n[:5] {
		case "flood":
			flood++
		case "other":
			other++
		}
	}
	if flood != size/2 || other != size/2 {
		t.Errorf("second transaction: %d of flood, %d of other; want %d each", flood, other, size/2)
	}
	// Each session's order is kept, and the barrier comes after every
	// item pushed before it, before every one pushed after.
	var all []string
	for _, b := range batches {
		all = append(all, names(b)...)
	}
	bar := slices.Index(all, "|")
	if bar != 302 {
		t.Fatalf("barrier at %d of %d; want after the 302 items pushed before it", bar, len(all))
	}
	if got := all[bar+1:]; !slices.Equal(got, []string{"light:3", "flood:201"}) {
		t.Errorf("after the barrier: %v; want light:3, flood:201", got)
	}
	last := map[string]int64{}
	for _, b := range batches {
		for i := range b {
			it := &b[i]
			if it.session() == "" {
				continue
			}
			if it.ev.Seq != last[it.ev.Session]+1 {
				t.Fatalf("%s:%d taken after %s:%d", it.ev.Session, it.ev.Seq, it.ev.Session, last[it.ev.Session])
			}
			last[it.ev.Session] = it.ev.Seq
		}
	}
	if q.len() != 0 {
		t.Errorf("%d items left", q.len())
	}
}

// Sessions of big items get their share by bytes: a session of 1 MiB items
// and one of 64 KiB items alternate by the bytes they take, not by items.
func TestTakeBatchSharesBytes(t *testing.T) {
	const size, maxBytes = 256, 1 << 20
	q := newQueue(1<<16, size, 256<<20)
	for i := range int64(8) {
		mustPush(t, q, fairItem("big", i+1, 1<<20))
	}
	for i := range int64(128) {
		mustPush(t, q, fairItem("mid", i+1, 64<<10))
	}
	bytes := map[string]int64{}
	for _, b := range takeAll(q, size, maxBytes)[:8] {
		for i := range b {
			bytes[b[i].ev.Session] += int64(len(b[i].ev.Data))
		}
	}
	// In the first 8 transactions, each session had about half the bytes.
	if r := float64(bytes["big"]) / float64(bytes["mid"]); r < 0.5 || r > 2 {
		t.Errorf("bytes taken: big %d, mid %d; want about even", bytes["big"], bytes["mid"])
	}
}

// A session holding a quarter of the queue's bytes waits for room, while
// another still finds it at once; the wait is counted as the session's.
func TestWaitRoomHoldsTheSessionThatFloods(t *testing.T) {
	q := newQueue(1<<16, 256, 8<<20)
	for i := range int64(2) {
		mustPush(t, q, fairItem("flood", i+1, 1<<20)) // 2 MiB: its share
	}
	ctx := context.Background()
	if d, err := q.waitRoom(ctx, "quick"); err != nil || d != 0 {
		t.Fatalf("waitRoom(quick) = %v, %v; want at once", d, err)
	}
	got := make(chan time.Duration, 1)
	go func() {
		d, err := q.waitRoom(ctx, "flood")
		if err != nil {
			t.Error(err)
		}
		got <- d
	}()
	waitFor(t, "the flood's producer to wait", func() bool {
		for _, sq := range q.sessionQueues() {
			if sq.Session == "flood" && sq.Waiting {
				return true
			}
		}
		return false
	})
	select {
	case d := <-got:
		t.Fatalf("the flood found room (after %v) with its share held", d)
	case <-time.After(20 * time.Millisecond):
	}
	b := q.takeBatch(nil, 256, 1<<20, false)
	q.settled(b)
	if d := <-got; d < 20*time.Millisecond {
		t.Errorf("the flood waited %v; want at least 20ms", d)
	}
	for _, sq := range q.sessionQueues() {
		if sq.Session == "flood" {
			if sq.Events != 1 || sq.Holds != 1 || sq.Held < 20*time.Millisecond || sq.Waiting {
				t.Errorf("flood's queue = %+v; want 1 event, 1 hold of 20ms or more, not waiting", sq)
			}
			return
		}
	}
	t.Error("no queue for the flood")
}

// Light sessions writing without pause do not starve a heavy one: once it
// has waited lightStreak, the light items go with a share of its items.
func TestTakeBatchLightSessionsDoNotStarveAHeavyOne(t *testing.T) {
	const size, maxBytes = 256, 1 << 20
	q := newQueue(1<<16, size, 64<<20)
	for i := range int64(1000) {
		mustPush(t, q, fairItem("flood", i+1, 100))
	}
	start := time.Now()
	heavyAt := time.Duration(-1)
	for i := range int64(2000) {
		mustPush(t, q, fairItem(fmt.Sprintf("light-%d", i), 1, 10))
		b := q.takeBatch(nil, size, maxBytes, false)
		for j := range b {
			if b[j].ev.Session == "flood" {
				heavyAt = time.Since(start)
			}
		}
		if heavyAt >= 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if heavyAt < 0 {
		t.Fatal("2000 light transactions in a row while a heavy session waited")
	}
	if heavyAt < lightStreak {
		t.Errorf("the heavy session was served after %v; want light ones alone first, for %v", heavyAt, lightStreak)
	}
}
