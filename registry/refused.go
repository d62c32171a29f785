package registry

import (
	"slices"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// NetworkRefusal is a connection of one of a provider's agents that the
// egress proxy refused.
type NetworkRefusal struct {
	// Host and Port are what the agent asked for.
	Host string `json:"host"`
	Port uint16 `json:"port"`
	// Addr is the address the host resolved to, when it was resolved.
	Addr string `json:"addr,omitempty"`
	// Reason says why it was refused.
	Reason string `json:"reason"`
	// Allow is the "sandbox.network" entry that would allow it.
	Allow string `json:"allow,omitempty"`
	// Session is the session whose agent asked, "" for a probe.
	Session string `json:"session,omitempty"`
	// Time is when it was recorded: a target refused again within
	// NetworkRefusedQuiet keeps the time it was first recorded at.
	Time time.Time `json:"time"`
}

const (
	// MaxNetworkRefused is how many refused targets (host and port) a
	// provider's status keeps, the newest first.
	MaxNetworkRefused = 5
	// NetworkRefusedQuiet is how long a refused target is not recorded
	// again: an agent that retries does not change the snapshot on every
	// attempt.
	NetworkRefusedQuiet = time.Minute
)

// refusedList is what a provider's agents were refused, under the network
// setting they were refused under.
type refusedList struct {
	network backends.SandboxSpec // Network, Ports and Hosts only
	list    []NetworkRefusal
}

// NetworkRefused records that the egress proxy refused a connection of an
// agent of provider id launched with sandbox sb, shown in the provider's
// NetworkRefused until its network setting changes. A target (host and
// port) already shown moves to the front, unless it was recorded less
// than NetworkRefusedQuiet ago. Unknown providers, and refusals under a
// network setting that is no longer the provider's (an agent started
// before an edit), are ignored.
func (r *Registry) NetworkRefused(id string, sb backends.SandboxSpec, ref NetworkRefusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.defs[id] == nil {
		return
	}
	p := r.cur.Load().byID[id]
	if p == nil || !sameNetwork(p.spec.Sandbox, sb) {
		return
	}
	now := r.cfg.Now()
	if ref.Time.IsZero() {
		ref.Time = now
	}
	cur := r.refused[id]
	if cur == nil || !sameNetwork(cur.network, sb) {
		cur = &refusedList{network: networkOf(sb)}
	}
	same := func(n NetworkRefusal) bool { return n.Host == ref.Host && n.Port == ref.Port }
	if i := slices.IndexFunc(cur.list, same); i >= 0 && now.Sub(cur.list[i].Time) < NetworkRefusedQuiet {
		return
	}
	// A new slice: the snapshots handed out share the old one.
	list := make([]NetworkRefusal, 0, MaxNetworkRefused)
	list = append(list, ref)
	for _, n := range cur.list {
		if !same(n) && len(list) < MaxNetworkRefused {
			list = append(list, n)
		}
	}
	r.refused[id] = &refusedList{network: cur.network, list: list}
	r.commitLocked()
}

// networkOf is the network setting of sb: its mode ("" as "all"), ports
// and hosts.
func networkOf(sb backends.SandboxSpec) backends.SandboxSpec {
	mode := sb.Network
	if mode == "" {
		mode = backends.NetworkAll
	}
	return backends.SandboxSpec{Network: mode, Ports: slices.Clone(sb.Ports), Hosts: slices.Clone(sb.Hosts)}
}

// sameNetwork reports whether a and b have the same network setting.
func sameNetwork(a, b backends.SandboxSpec) bool {
	a, b = networkOf(a), networkOf(b)
	return a.Network == b.Network && slices.Equal(a.Ports, b.Ports) && slices.Equal(a.Hosts, b.Hosts)
}
