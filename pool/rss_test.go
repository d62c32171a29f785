package pool

import (
	"sync"
	"testing"
	"time"
)

// TestRSSCache: calls within fresh of a scan share it, a later call
// scans again, and so does one after the clock went back.
func TestRSSCache(t *testing.T) {
	now := time.Unix(1000, 0)
	scans := 0
	c := &rssCache{
		scan:  func() map[int]int64 { scans++; return map[int]int64{7: int64(scans)} },
		fresh: 250 * time.Millisecond,
		now:   func() time.Time { return now },
	}
	steps := []struct {
		advance time.Duration
		want    int64 // the scan answering
	}{
		{0, 1},
		{100 * time.Millisecond, 1},
		{149 * time.Millisecond, 1},
		{time.Millisecond, 2}, // 250 ms after the first
		{-time.Second, 3},
		{0, 3},
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		if got := c.get()[7]; got != st.want {
			t.Errorf("step %d: answered by scan %d; want %d", i, got, st.want)
		}
	}
	if scans != 3 {
		t.Errorf("%d scans; want 3", scans)
	}
}

// TestRSSCacheStale: with stale set, a scan older than fresh answers at
// once while one new scan runs in the background; one older than stale
// is made in the caller; close waits for the background scan.
func TestRSSCacheStale(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	scans := 0
	release := make(chan struct{}, 10)
	c := &rssCache{
		scan: func() map[int]int64 {
			mu.Lock()
			scans++
			n := scans
			mu.Unlock()
			if n > 1 {
				<-release // the background scans wait to be let go
			}
			return map[int]int64{7: int64(n)}
		},
		fresh: 250 * time.Millisecond,
		stale: 2 * time.Second,
		now:   clock,
	}
	if got := c.getStale()[7]; got != 1 {
		t.Fatalf("first call answered by scan %d; want 1, made at once", got)
	}
	advance(300 * time.Millisecond)
	for range 3 {
		if got := c.getStale()[7]; got != 1 {
			t.Fatalf("call after fresh answered by scan %d; want the old one while scan 2 runs", got)
		}
	}
	release <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for c.getStale()[7] != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the background scan never answered")
		}
		time.Sleep(time.Millisecond)
	}
	advance(3 * time.Second)
	release <- struct{}{} // for the scan made in the caller
	if got := c.getStale()[7]; got != 3 {
		t.Fatalf("call after stale answered by scan %d; want 3, made at once", got)
	}
	advance(300 * time.Millisecond)
	c.getStale() // starts scan 4 in the background
	done := make(chan struct{})
	go func() { c.close(); close(done) }()
	select {
	case <-done:
		t.Fatal("close returned while a background scan ran")
	case <-time.After(20 * time.Millisecond):
	}
	release <- struct{}{}
	<-done
	// What the pool shows never comes from a scan older than fresh.
	advance(300 * time.Millisecond)
	release <- struct{}{}
	if got := c.get()[7]; got != 5 {
		t.Errorf("get after fresh answered by scan %d; want 5, made at once", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if scans != 5 {
		t.Errorf("%d scans; want 5", scans)
	}
}
