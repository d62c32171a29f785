package pool

import (
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
