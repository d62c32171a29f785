package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/agentpool/agentpool/hosts"
)

// proof is what this host learnt when it asked another host to prove it
// holds the cluster key (Config.Verify).
type proof struct {
	ok bool
	at time.Time
}

// proofTimeout bounds one host's proof; proofRetry is how long a failed
// proof stands before the host is asked again.
const (
	proofTimeout = 3 * time.Second
	proofRetry   = 5 * time.Second
)

// verifyHosts returns, by id, the hosts of list that proved they hold
// this cluster's key (this host, and every host when there is no
// Config.Verify): a host is asked once per start of it, the hosts not
// asked yet all at once; one whose proof failed is asked again after
// proofRetry. A host that does not prove it is not placed sessions: it
// was started with another key, and every request forwarded to it would
// be refused.
func (c *Cluster) verifyHosts(ctx context.Context, list []hosts.Status) map[string]bool {
	out := make(map[string]bool, len(list))
	var ask []hosts.Status
	c.pmu.Lock()
	for _, h := range list {
		if h.Self || c.cfg.Verify == nil {
			out[h.ID] = true
			continue
		}
		if !h.Alive {
			continue
		}
		p, ok := c.proofs[proofKey(h)]
		switch {
		case ok && p.ok:
			out[h.ID] = true
		case !ok || time.Since(p.at) >= proofRetry:
			ask = append(ask, h)
		}
	}
	c.pmu.Unlock()
	if len(ask) == 0 {
		return out
	}
	var wg sync.WaitGroup
	results := make([]error, len(ask))
	for i, h := range ask {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vctx, cancel := context.WithTimeout(ctx, proofTimeout)
			defer cancel()
			results[i] = c.cfg.Verify(vctx, Host{ID: h.ID, Advertise: h.Advertise})
		}()
	}
	wg.Wait()
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for i, h := range ask {
		ok := results[i] == nil
		if prev, seen := c.proofs[proofKey(h)]; !ok && (!seen || prev.ok) {
			c.cfg.Logger.Error("a host of the cluster did not prove it holds this cluster's key: no session is placed on it",
				"host", h.ID, "url", h.Advertise, "err", results[i])
		}
		c.proofs[proofKey(h)] = proof{ok: ok, at: time.Now()}
		out[h.ID] = ok
	}
	return out
}

// proofKey names one start of a host.
func proofKey(h hosts.Status) string { return h.ID + "@" + h.StartedAt.UTC().Format(time.RFC3339Nano) }
