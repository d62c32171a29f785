package pool

import (
	"sync"
	"time"
)

// rssFresh is how long one scan of /proc answers the memory budget's
// checks. Each check needs the size of every warm agent, which one scan of
// /proc gives; made for every agent start, under the pool's lock, the
// scans grew with the square of the agents (300 sessions created at once
// spent much of a CPU reading /proc). An agent that grows past the budget
// is seen at most this much later.
const rssFresh = 250 * time.Millisecond

// rssCache answers GroupRSS from a scan made less than fresh ago, and
// makes one scan at a time.
type rssCache struct {
	scan  func() map[int]int64
	fresh time.Duration
	now   func() time.Time // a monotonic clock: time.Now

	mu sync.Mutex
	at time.Time
	m  map[int]int64
}

// get returns the RSS by process group; the map is shared and must not
// be changed.
func (c *rssCache) get() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.m == nil || now.Sub(c.at) >= c.fresh || now.Before(c.at) {
		c.m, c.at = c.scan(), now
	}
	return c.m
}
