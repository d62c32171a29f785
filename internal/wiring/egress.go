package wiring

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/egress"
	"github.com/agentpool/agentpool/registry"
)

// Egress gives each confined launch its way out of its network namespace:
// a listener of the daemon's egress proxy with the provider's network
// policy, whose refusals become events of the launch's session.
type Egress struct {
	// Proxy is the daemon's egress proxy.
	Proxy *egress.Proxy
	// Dir is a directory only the daemon's user can enter, with a short
	// path (a unix socket's path is at most 107 bytes), for the sockets.
	Dir string
	// Report, if set, is told of every refusal: the provider the launch
	// names (a setup's is "_setup", no provider's id), the sandbox it was
	// launched with, and the refusal, whose Session is "" outside a
	// session (a probe, a setup). Set it before the first launch; it is
	// called from the proxy's goroutines and must not block.
	Report func(provider string, sb backends.SandboxSpec, r registry.NetworkRefusal)

	mu     sync.Mutex
	routes map[egress.Meta]*route
}

// route is where the refusals of one launch go: emit for its session's
// events (nil for a probe or a setup), and Report with its sandbox.
type route struct {
	emit    func(backends.Event)
	sb      backends.SandboxSpec
	session string
}

// EventNetworkRefused is the session event of a connection the egress
// proxy refused; its data is a NetworkRefusal.
const EventNetworkRefused backends.EventType = "network.refused"

// NetworkRefusal is the data of an EventNetworkRefused event.
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
}

// Refused routes a refusal of the proxy to its launch's session and to
// Report: the proxy's Config.OnRefused.
func (e *Egress) Refused(r egress.Refusal) {
	e.mu.Lock()
	rt := e.routes[r.Meta]
	e.mu.Unlock()
	if rt == nil {
		return
	}
	if rt.emit != nil {
		rt.emit(backends.NewEvent(EventNetworkRefused, r.Provider, NetworkRefusal{Host: r.Host, Port: r.Port, Addr: r.Addr, Reason: r.Reason, Allow: r.Allow}))
	}
	if e.Report != nil {
		e.Report(r.Provider, rt.sb, registry.NetworkRefusal{Host: r.Host, Port: r.Port, Addr: r.Addr, Reason: r.Reason, Allow: r.Allow, Session: rt.session})
	}
}

// open makes the listener of one launch with sb's network policy and
// returns what its jail shows of it and the function that closes it; nil
// and a no-op for a provider whose network is "none". emit receives the
// refusals as events of the launch's session; nil for a launch outside
// any (a probe, a setup).
func (e *Egress) open(sb backends.SandboxSpec, meta egress.Meta, emit func(backends.Event)) (*sandbox.EgressView, func(), error) {
	if e == nil || e.Proxy == nil || sb.Network == backends.NetworkNone {
		return nil, func() {}, nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	path := filepath.Join(e.Dir, hex.EncodeToString(b[:])+".sock")
	ln, err := e.Proxy.Listen(path, EgressPolicy(sb), meta)
	if err != nil {
		return nil, nil, fmt.Errorf("egress: %w", err)
	}
	rt := &route{emit: emit, sb: sb}
	if emit != nil {
		rt.session = meta.Session
	}
	e.mu.Lock()
	if e.routes == nil {
		e.routes = map[egress.Meta]*route{}
	}
	e.routes[meta] = rt
	e.mu.Unlock()
	var once sync.Once
	closeFn := func() {
		once.Do(func() {
			_ = ln.Close()
			e.mu.Lock()
			if e.routes[meta] == rt {
				delete(e.routes, meta)
			}
			e.mu.Unlock()
		})
	}
	return &sandbox.EgressView{Socket: path, Forward: Forwards(sb), Network: EgressPolicy(sb).Mode}, closeFn, nil
}

// EgressPolicy is the proxy's policy for a provider's sandbox.
func EgressPolicy(sb backends.SandboxSpec) egress.Policy {
	mode := sb.Network
	if mode == "" {
		mode = backends.NetworkAll
	}
	return egress.Policy{Mode: mode, Ports: sb.Ports, Hosts: sb.Hosts}
}

// Forwards are the loopback "host:port" entries of a provider's network
// list: each answers at the same port on loopback inside the agent's
// network namespace, so that an agent pointed at a local model server
// reaches it without a proxy.
func Forwards(sb backends.SandboxSpec) []sandbox.Forward {
	var out []sandbox.Forward
	for _, s := range sb.Hosts {
		h, err := egress.ParseHost(s)
		if err != nil || h.Port == 0 {
			continue
		}
		loop := h.Name == "localhost" && !h.Wildcard
		if h.Prefix.IsValid() && h.Prefix.IsSingleIP() && h.Prefix.Addr().Unmap().IsLoopback() {
			loop = true
		}
		if !loop {
			continue
		}
		target := h.String()
		if h.Prefix.IsValid() {
			target = netip.AddrPortFrom(h.Prefix.Addr(), h.Port).String()
		}
		out = append(out, sandbox.Forward{Port: h.Port, Target: target})
	}
	return out
}
