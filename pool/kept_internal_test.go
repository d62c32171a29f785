package pool

import (
	"errors"
	"sync"
	"testing"
)

// TestKept: a value is read once and kept; a read that fails is not kept;
// a read during which the value was forgotten (changed) is returned but
// not kept, so the next get reads what was stored.
func TestKept(t *testing.T) {
	var mu sync.Mutex
	var k kept[int]
	reads := 0
	load := func(v int) func() (int, error) { return func() (int, error) { reads++; return v, nil } }
	if _, err := k.get(&mu, func() (int, error) { reads++; return 0, errors.New("down") }); err == nil {
		t.Fatal("a failed read returned no error")
	}
	for range 3 {
		if v, err := k.get(&mu, load(1)); v != 1 || err != nil {
			t.Fatalf("get = %d, %v; want 1", v, err)
		}
	}
	if reads != 2 {
		t.Errorf("%d reads; want 2 (the failed one, then one kept)", reads)
	}
	mu.Lock()
	k.forget()
	mu.Unlock()
	// A change made while the value is being read: the read is stale.
	v, _ := k.get(&mu, func() (int, error) {
		mu.Lock()
		k.forget()
		mu.Unlock()
		return 2, nil
	})
	if v != 2 || k.val != nil {
		t.Errorf("a read overtaken by a change: got %d, kept %v; want 2, nothing kept", v, k.val)
	}
	if v, _ := k.get(&mu, load(3)); v != 3 {
		t.Errorf("get after the stale read = %d; want 3, read again", v)
	}
}
