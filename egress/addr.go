package egress

import "net/netip"

// nat64 is the well-known NAT64 prefix (RFC 6052): its last 32 bits are an
// IPv4 address that a NAT64 gateway reaches.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// metadata is the address of the cloud instance metadata services.
var metadata = netip.MustParseAddr("169.254.169.254")

// special lists the non-public ranges that netip.Addr has no method for,
// with the words a refusal uses for them. It is never modified.
var special = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `a "this network" address (0.0.0.0/8)`},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (carrier-grade NAT) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol assignment address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible (deprecated) address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
}

// unwrap returns the IPv4 address an IPv4-mapped or NAT64 address stands
// for, and any other address unchanged, without its zone.
func unwrap(a netip.Addr) netip.Addr {
	a = a.WithZone("")
	switch {
	case a.Is4In6():
		return a.Unmap()
	case nat64.Contains(a):
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return a
}

// class describes what makes a non-public, with an article ("a loopback
// address"), or returns "" for a public address. IPv4-mapped and NAT64
// forms are judged by the IPv4 address they carry.
func class(a netip.Addr) string {
	a = unwrap(a)
	switch {
	case !a.IsValid():
		return "no valid address"
	case a.IsUnspecified():
		return "the unspecified address"
	case a.IsLoopback():
		return "a loopback address"
	case a == metadata:
		return "the cloud metadata address (link-local)"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "a link-local address"
	case a.IsMulticast():
		return "a multicast address"
	case a.IsPrivate():
		return "a private address"
	}
	for _, s := range special {
		if s.prefix.Contains(a) {
			return s.kind
		}
	}
	return ""
}

// Public reports whether a is an address of the public internet: not
// loopback, private (RFC 1918, fc00::/7), shared (100.64.0.0/10),
// link-local (169.254.0.0/16, fe80::/10), unspecified, 0.0.0.0/8,
// multicast, broadcast, reserved (240.0.0.0/4) or another special-purpose
// range. An IPv4-mapped or NAT64 (64:ff9b::/96) address is judged by the
// IPv4 address it carries.
func Public(a netip.Addr) bool { return class(a) == "" }
