package store

import (
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// A writer that has had nothing to write for FlushInterval commits what
// wakes it at once: a turn's start or a reply's first token on a quiet
// daemon is not held back for a batch that is not coming. (While it is
// busy it still lingers: the tests with FlushInterval an hour rely on it.)
func TestQuietWriterDoesNotLinger(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e testEngine) {
		var mu sync.Mutex
		now := time.Now()
		clock := func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		}
		s, _ := openTest(t, e.db(t, Config{FlushInterval: time.Hour, Now: clock}))
		mustSession(t, s, "s1")
		mu.Lock()
		now = now.Add(2 * time.Hour) // the store has been quiet for longer than FlushInterval
		mu.Unlock()
		committed := make(chan struct{})
		s.AppendNotify(testEvent("s1", 1, time.Now()), func(backends.Event) { close(committed) })
		select {
		case <-committed:
		case <-time.After(30 * time.Second):
			t.Fatal("the event of a quiet store was not committed: the writer lingered FlushInterval (an hour) for a batch")
		}
	})
}
