package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Modes of Policy.Mode.
const (
	// ModeNone refuses every connection.
	ModeNone = "none"
	// ModeAll allows every public address on every port, and what the
	// entries of Policy.Hosts name.
	ModeAll = "all"
	// ModeList allows only a port of Policy.Ports on a public address, or
	// what an entry of Policy.Hosts names.
	ModeList = "list"
)

// Policy says where the agents behind one Listener may connect. Ports are
// ignored outside ModeList, and Hosts under ModeNone. A loopback, private,
// link-local or otherwise non-public address (see Public) is reachable only
// through an entry that names it: an address, a range, or "localhost".
type Policy struct {
	// Mode is ModeNone, ModeAll or ModeList.
	Mode string
	// Ports are the ports allowed on every public address (ModeList).
	Ports []uint16
	// Hosts are allow-list entries in the forms ParseHost reads.
	Hosts []string
}

// Meta names the agent launch a Listener serves; it is logged with each
// connection and copied into each Refusal.
type Meta struct {
	// Session is the session's id.
	Session string
	// Provider is the provider's id.
	Provider string
}

// Refusal describes one connection the policy refused.
type Refusal struct {
	Meta
	// Host is the host the agent asked for, a name or an address.
	Host string
	// Port is the port the agent asked for.
	Port uint16
	// Addr is the resolved address that was refused, "" when the
	// connection was refused before resolving the name.
	Addr string
	// Reason says why, in a few words ("not on the allow-list", "db.example
	// resolves to 10.1.2.3, a private address").
	Reason string
	// Allow is the allow-list entry that would allow the connection:
	// "api.example.com:443", or the address and port ("10.0.0.5:8080",
	// "localhost:11434") when the name resolved to a non-public address.
	Allow string
}

// String returns the refusal as one line, as the agent sees it.
func (r Refusal) String() string {
	s := fmt.Sprintf("agentpool egress: connection to %s refused: %s", joinHostPort(r.Host, r.Port), r.Reason)
	if r.Allow != "" {
		s += fmt.Sprintf("; the entry %q in the provider's sandbox.network would allow it", r.Allow)
	}
	return s
}

// rules is a checked Policy. It is never modified once made.
type rules struct {
	mode  string
	ports []uint16
	hosts []Host
}

// compile checks p and returns its rules.
func compile(p Policy) (*rules, error) {
	switch p.Mode {
	case ModeNone, ModeAll, ModeList:
	default:
		return nil, fmt.Errorf("policy: unknown mode %q (want %q, %q or %q)", p.Mode, ModeNone, ModeAll, ModeList)
	}
	r := &rules{mode: p.Mode, ports: slices.Clone(p.Ports)}
	if slices.Contains(r.ports, 0) {
		return nil, fmt.Errorf("policy: port 0 (want 1 to 65535)")
	}
	for _, s := range p.Hosts {
		h, err := ParseHost(s)
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		r.hosts = append(r.hosts, h)
	}
	return r, nil
}

// target is the host and port an agent asked for.
type target struct {
	name string     // lower case, no trailing dot; "" when addr is set
	addr netip.Addr // an address the agent gave literally
	port uint16
}

// host returns the host as the agent gave it, normalised.
func (t target) host() string {
	if t.addr.IsValid() {
		return t.addr.String()
	}
	return t.name
}

// String returns host:port, with an IPv6 address in brackets.
func (t target) String() string { return joinHostPort(t.host(), t.port) }

// parseTarget reads the host and port an agent asked for. The host is an
// address (without a zone) or a host name.
func parseTarget(host, port string) (target, error) {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return target{}, fmt.Errorf("invalid port %q", port)
	}
	return makeTarget(host, uint16(p))
}

// makeTarget is parseTarget with a numeric port.
func makeTarget(host string, port uint16) (target, error) {
	if port == 0 {
		return target{}, fmt.Errorf("invalid port 0")
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return target{}, fmt.Errorf("address %q has a zone", host)
		}
		return target{addr: a, port: port}, nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if msg := checkName(name); msg != "" {
		return target{}, fmt.Errorf("invalid host: %s", msg)
	}
	return target{name: name, port: port}, nil
}

// joinHostPort is net.JoinHostPort with a numeric port.
func joinHostPort(host string, port uint16) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// Reasons of refusals that do not depend on the address.
const (
	reasonNone      = `the provider's network is "none"`
	reasonNotListed = "not on the allow-list"
)

// mayAllow reports whether some address of t could be allowed, before
// resolving its name: a name no rule can allow is refused without asking
// DNS, so a refused agent cannot use the resolver as a channel.
func (r *rules) mayAllow(t target) bool {
	switch {
	case r.mode == ModeAll:
		return true
	case r.mode == ModeNone:
		return false
	case slices.Contains(r.ports, t.port):
		return true
	}
	for _, h := range r.hosts {
		switch {
		case h.Port != 0 && h.Port != t.port:
		case h.Name == "", h.localhost(), t.name != "" && h.matchName(t.name):
			return true
		}
	}
	return false
}

// check decides on a connection to t at address a: it returns "" when
// allowed, else the reason of the refusal.
func (r *rules) check(t target, a netip.Addr, deny []netip.AddrPort) string {
	u := a.Unmap()
	if denied(deny, u, t.port) {
		if r.mode != ModeNone && slices.ContainsFunc(r.hosts, func(h Host) bool { return h.exact(t, u) }) {
			return ""
		}
		return fmt.Sprintf("%s is the daemon's own address", netip.AddrPortFrom(u, t.port))
	}
	if r.mode == ModeNone {
		return reasonNone
	}
	if slices.ContainsFunc(r.hosts, func(h Host) bool { return h.allows(t, u) }) {
		return ""
	}
	kind := class(u)
	switch {
	case kind == "" && (r.mode == ModeAll || slices.Contains(r.ports, t.port)):
		return ""
	case kind == "":
		return reasonNotListed
	case t.name == "":
		return fmt.Sprintf("%s is %s", u, kind)
	}
	reason := fmt.Sprintf("%s resolves to %s, %s", t.name, u, kind)
	if slices.ContainsFunc(r.hosts, func(h Host) bool {
		return h.Name != "" && !h.localhost() && h.matchName(t.name) && (h.Port == 0 || h.Port == t.port)
	}) {
		reason += ", and a name entry allows public addresses only"
	}
	return reason
}

// denied reports whether a:port is one of the daemon's own addresses; an
// unspecified address in deny stands for every address.
func denied(deny []netip.AddrPort, a netip.Addr, port uint16) bool {
	for _, d := range deny {
		if d.Port() == port && (d.Addr() == a || d.Addr().IsUnspecified()) {
			return true
		}
	}
	return false
}

// refusal describes the refusal of t at address a (the zero Addr when
// refused before resolving) for reason.
func refusal(t target, a netip.Addr, reason string, deny []netip.AddrPort) *Refusal {
	ref := &Refusal{Host: t.host(), Port: t.port, Reason: reason, Allow: t.String()}
	if !a.IsValid() {
		return ref
	}
	u := a.Unmap()
	ref.Addr = u.String()
	switch {
	case !Public(u) && t.name == "localhost" && u.IsLoopback():
		ref.Allow = joinHostPort("localhost", t.port)
	case !Public(u) || denied(deny, u, t.port):
		ref.Allow = netip.AddrPortFrom(u, t.port).String()
	}
	return ref
}
