package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Host is one entry of a Policy's allow-list, as ParseHost reads it. An
// entry has a Name or a Prefix, and may have a Port.
type Host struct {
	// Name is a lower-case DNS name without a trailing dot, or "" for an
	// address or a range. A name allows only the public addresses it
	// resolves to, except "localhost", which allows every loopback
	// address however the agent names it ("localhost", "127.0.0.1",
	// "[::1]").
	Name string
	// Wildcard makes Name stand for its subdomains only: "*.example.com"
	// matches "api.example.com" and "a.b.example.com", never
	// "example.com" itself (list both to allow both).
	Wildcard bool
	// Prefix is the address (a single-address prefix) or the range of an
	// entry without a Name. It allows exactly those addresses, whatever
	// their class: loopback, private and link-local included.
	Prefix netip.Prefix
	// Port is the only port the entry allows; 0 allows every port.
	Port uint16
}

// ParseHost reads one allow-list entry. The forms are:
//
//	example.com           the name, every port
//	example.com:443       the name, one port
//	*.example.com         every subdomain of example.com (not example.com)
//	*.example.com:443     the same, one port
//	localhost:11434       every loopback address, one port
//	10.0.0.5  10.0.0.5:8080  ::1  [::1]:8080   one address, every port or one
//	10.0.0.0/8  10.0.0.0/8:5432  fd00::/8  [fd00::/8]:5432   a range (CIDR)
//
// Names are compared without case and without a trailing dot. An
// IPv4-mapped IPv6 address or range is read as the IPv4 one. The error
// says what is wrong with s and how such an entry is written.
func ParseHost(s string) (Host, error) {
	h, err := parseHost(s)
	if err != nil {
		return Host{}, fmt.Errorf("host %q: %w", s, err)
	}
	return h, nil
}

// String returns h in the form ParseHost reads, canonical: ParseHost of
// the result gives h again.
func (h Host) String() string {
	var s string
	switch {
	case h.Name != "" && h.Wildcard:
		s = "*." + h.Name
	case h.Name != "":
		s = h.Name
	case h.Prefix.IsSingleIP():
		if h.Port != 0 {
			return netip.AddrPortFrom(h.Prefix.Addr(), h.Port).String()
		}
		return h.Prefix.Addr().String()
	case h.Port != 0 && h.Prefix.Addr().Is6():
		s = "[" + h.Prefix.String() + "]"
	default:
		s = h.Prefix.String()
	}
	if h.Port != 0 {
		s += ":" + strconv.Itoa(int(h.Port))
	}
	return s
}

// parseHost is ParseHost without the entry in its errors.
func parseHost(s string) (Host, error) {
	switch {
	case s == "":
		return Host{}, errors.New("empty (want a name, an address or a range, e.g. \"api.example.com:443\")")
	case strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return Host{}, errors.New("contains a space or a control character")
	case strings.Contains(s, "://"):
		return Host{}, errors.New(`a URL: write the host alone, e.g. "api.example.com" or "api.example.com:443"`)
	case s == "*":
		return Host{}, errors.New(`"*" is not an entry ("all" allows every public address)`)
	}
	host, port, hasPort, bracketed, err := splitEntry(s)
	if err != nil {
		return Host{}, err
	}
	var h Host
	if hasPort {
		if h.Port, err = parsePort(port); err != nil {
			return Host{}, err
		}
	}
	switch {
	case strings.Contains(host, "/"):
		h.Prefix, err = parsePrefix(host)
	case bracketed || strings.Contains(host, ":"):
		h.Prefix, err = parseAddr(host)
	case looksNumeric(host):
		if _, e := netip.ParseAddr(host); e != nil {
			if _, e := strconv.Atoi(host); e == nil {
				return Host{}, errors.New("a number, not a host (a port alone is written as a number, without quotes)")
			}
			return Host{}, fmt.Errorf("%q is not a valid IP address", host)
		}
		h.Prefix, err = parseAddr(host)
	default:
		h.Name, h.Wildcard, err = parseName(host)
	}
	if err != nil {
		return Host{}, err
	}
	if bracketed && h.Prefix.Addr().Is4() {
		return Host{}, fmt.Errorf("brackets are for IPv6; write %q", Host{Prefix: h.Prefix, Port: h.Port}.String())
	}
	return h, nil
}

// splitEntry splits an entry into its host and port parts. An IPv6
// address or range with a port is in brackets; without one, brackets are
// optional.
func splitEntry(s string) (host, port string, hasPort, bracketed bool, err error) {
	if rest, ok := strings.CutPrefix(s, "["); ok {
		host, after, ok := strings.Cut(rest, "]")
		if !ok {
			return "", "", false, false, errors.New(`missing "]"`)
		}
		if after == "" {
			return host, "", false, true, nil
		}
		if port, ok := strings.CutPrefix(after, ":"); ok {
			return host, port, true, true, nil
		}
		return "", "", false, false, fmt.Errorf("unexpected %q after \"]\" (want \"[addr]:port\")", after)
	}
	if strings.Count(s, ":") == 1 {
		host, port, _ := strings.Cut(s, ":")
		return host, port, true, false, nil
	}
	return s, "", false, false, nil // no port, or an IPv6 address or range without one
}

// parsePort reads a TCP port, 1 to 65535.
func parsePort(s string) (uint16, error) {
	if s == "*" {
		return 0, errors.New(`port "*": leave the port out to allow every port`)
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("invalid port %q (want 1 to 65535)", s)
	}
	return uint16(n), nil
}

// parseAddr reads a single address as a prefix of its own length.
func parseAddr(s string) (netip.Prefix, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a valid IP address (an IPv6 address with a port is written \"[addr]:port\")", s)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q has a zone, which an entry cannot have", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// parsePrefix reads a range in CIDR notation, which must have no bits set
// past its length.
func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a valid range (want e.g. \"10.0.0.0/8\" or \"fd00::/8\")", s)
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("range %q has bits set past /%d (did you mean %q?)", s, p.Bits(), m.String())
	}
	return p, nil
}

// looksNumeric reports whether s has only digits and dots: an address, a
// mistyped one, or a number, but never a host name (no top-level domain is
// numeric).
func looksNumeric(s string) bool {
	return strings.Trim(s, "0123456789.") == ""
}

// parseName reads a DNS name entry, with an optional leading "*." label.
func parseName(s string) (name string, wildcard bool, err error) {
	name = strings.ToLower(strings.TrimSuffix(s, "."))
	name, wildcard = strings.CutPrefix(name, "*.")
	if strings.Contains(name, "*") {
		return "", false, errors.New(`"*" is allowed only as the whole first label ("*.example.com")`)
	}
	if msg := checkName(name); msg != "" {
		return "", false, errors.New(msg)
	}
	if wildcard && !strings.Contains(name, ".") {
		return "", false, fmt.Errorf("%q covers a whole top-level domain; name the domain (\"*.example.%s\")", "*."+name, name)
	}
	return name, wildcard, nil
}

// checkName returns why name (lower case, no trailing dot) is not a valid
// host name, or "". Labels hold letters, digits, "-" and "_" (some real
// hosts have one), do not start or end with "-", and the last is not all
// digits.
func checkName(name string) string {
	if name == "" {
		return "empty host name"
	}
	if len(name) > 253 {
		return "host name longer than 253 characters"
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return fmt.Sprintf("%q has an empty label", name)
		case len(l) > 63:
			return fmt.Sprintf("%q has a label longer than 63 characters", name)
		case l[0] == '-' || l[len(l)-1] == '-':
			return fmt.Sprintf("%q has a label that starts or ends with \"-\"", name)
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return fmt.Sprintf("%q has the character %q, which a host name cannot have", name, r)
			}
		}
	}
	if looksNumeric(labels[len(labels)-1]) {
		return fmt.Sprintf("%q is neither a valid IP address nor a host name", name)
	}
	return ""
}

// matchName reports whether h, a name entry, matches name (lower case, no
// trailing dot).
func (h Host) matchName(name string) bool {
	if h.Wildcard {
		return strings.HasSuffix(name, "."+h.Name)
	}
	return name == h.Name
}

// localhost reports whether h is the "localhost" entry, which stands for
// every loopback address.
func (h Host) localhost() bool { return h.Name == "localhost" && !h.Wildcard }

// allows reports whether h allows a connection to t at address a (unmapped).
func (h Host) allows(t target, a netip.Addr) bool {
	switch {
	case h.Port != 0 && h.Port != t.port:
		return false
	case h.Name == "":
		return h.Prefix.Contains(a)
	case h.localhost():
		return a.IsLoopback()
	}
	return t.name != "" && h.matchName(t.name) && Public(a)
}

// exact reports whether h names t's port and address a (unmapped) exactly:
// one port, and one address, the loopback ("localhost"), or t's own name.
func (h Host) exact(t target, a netip.Addr) bool {
	if h.Port == 0 || h.Port != t.port {
		return false
	}
	switch {
	case h.Name == "":
		return h.Prefix.IsSingleIP() && h.Prefix.Addr() == a
	case h.localhost():
		return a.IsLoopback()
	}
	return !h.Wildcard && t.name == h.Name && Public(a)
}
