package httpapi

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
)

// Errors of nonceCache.add.
var (
	// errReplayed refuses a signature whose nonce was seen before.
	errReplayed = errors.New("replayed: this host signature was already used (each is good for one request)")
	// errNonceForgotten refuses a signature older than the nonces kept.
	errNonceForgotten = errors.New("this host signature is older than the signatures this host still remembers (it takes many at once): send the request again")
)

// nonceCache remembers the nonces of the signatures accepted, by the
// second they were signed at, for as long as signWindow would accept
// them again. Past maxSignNonces it forgets the oldest second's and
// refuses, from then on, every signature made at or before that second
// (floor): memory stays bounded and nothing forgotten can be replayed.
// The zero value is ready to use.
type nonceCache struct {
	mu      sync.Mutex
	max     int // 0: maxSignNonces
	n       int
	floor   int64
	swept   int64 // the latest second nonces were swept at
	buckets map[int64]map[[signNonceBytes]byte]struct{}
}

// add records nonce (hex, signNonceBytes) of a signature made at the
// Unix second at, now being now: an error if it was seen before or can
// no longer be told from one that was.
func (c *nonceCache) add(now, at int64, nonce string) error {
	var k [signNonceBytes]byte
	if len(nonce) != 2*signNonceBytes {
		return fmt.Errorf("malformed signature nonce %q", nonce)
	}
	if _, err := hex.Decode(k[:], []byte(nonce)); err != nil {
		return fmt.Errorf("malformed signature nonce %q", nonce)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buckets == nil {
		c.buckets = map[int64]map[[signNonceBytes]byte]struct{}{}
	}
	window := int64(signWindow.Seconds())
	if now > c.swept {
		c.swept = now
		for sec, b := range c.buckets {
			if sec < now-window { // too old to be accepted again anyway
				c.n -= len(b)
				delete(c.buckets, sec)
			}
		}
	}
	// A later call may have swept at's second already (its now ahead of
	// this one's): what it dropped cannot be told apart from new.
	if at <= c.floor || at < c.swept-window {
		return errNonceForgotten
	}
	if _, seen := c.buckets[at][k]; seen {
		return errReplayed
	}
	limit := c.max
	if limit <= 0 {
		limit = maxSignNonces
	}
	for c.n >= limit {
		oldest, first := int64(0), true
		for sec := range c.buckets {
			if first || sec < oldest {
				oldest, first = sec, false
			}
		}
		c.n -= len(c.buckets[oldest])
		delete(c.buckets, oldest)
		c.floor = max(c.floor, oldest)
	}
	if at <= c.floor {
		return errNonceForgotten
	}
	b := c.buckets[at]
	if b == nil {
		b = map[[signNonceBytes]byte]struct{}{}
		c.buckets[at] = b
	}
	b[k] = struct{}{}
	c.n++
	return nil
}
