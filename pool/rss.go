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
// is seen at most this much later by a busy pool, and at most rssStale
// later by the first check after a quiet spell.
const rssFresh = 250 * time.Millisecond

// rssStale is how old a scan may be and still answer a check while a new
// one runs in the background: an agent's start then never waits for a
// scan of /proc (a millisecond or more with many processes) unless the
// pool was quiet for that long.
const rssStale = 2 * time.Second

// rssCache answers GroupRSS from a scan made less than fresh ago, and
// makes one scan at a time. With stale set, a scan older than fresh but
// younger than stale still answers, and a new one is made in the
// background for the next call.
type rssCache struct {
	scan  func() map[int]int64
	fresh time.Duration
	stale time.Duration    // 0: never answer from a scan older than fresh
	now   func() time.Time // a monotonic clock: time.Now

	mu         sync.Mutex
	at         time.Time
	m          map[int]int64
	refreshing bool
	closed     bool
	wg         sync.WaitGroup // the background scan
}

// get returns the RSS by process group from a scan younger than fresh
// (what the pool shows: a new agent is in it); the map is shared and must
// not be changed.
func (c *rssCache) get() map[int]int64 { return c.read(false) }

// getStale is get for the memory budget's checks: with stale set, a scan
// up to stale old answers while a new one runs in the background.
func (c *rssCache) getStale() map[int]int64 { return c.read(true) }

func (c *rssCache) read(staleOK bool) map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	age := now.Sub(c.at)
	limit := c.stale
	if !staleOK || c.closed || limit < c.fresh {
		limit = c.fresh
	}
	switch {
	case c.m == nil || now.Before(c.at) || age >= limit:
		c.m, c.at = c.scan(), now
	case age >= c.fresh && !c.refreshing:
		c.refreshing = true
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			m := c.scan()
			c.mu.Lock()
			defer c.mu.Unlock()
			c.m, c.at, c.refreshing = m, c.now(), false
		}()
	}
	return c.m
}

// budgetRSS is the RSS by process group for the memory budget's checks
// (see rssCache.getStale).
func (p *Pool) budgetRSS() map[int]int64 {
	if p.rss != nil {
		return p.rss.getStale()
	}
	return p.cfg.GroupRSS()
}

// close waits for a background scan; later calls scan in the caller.
func (c *rssCache) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
}
