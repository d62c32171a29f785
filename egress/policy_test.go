package egress

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestRoute decides on targets without sockets: which addresses would be
// dialed, or the refusal, and whether the name was resolved at all.
func TestRoute(t *testing.T) {
	names := map[string]string{
		"api.example.com":   "203.0.113.7",
		"example.com":       "203.0.113.8",
		"a.b.example.com":   "203.0.113.9",
		"evil.example.com":  "127.0.0.1",
		"intra.example.com": "10.1.2.3",
		"meta.example.com":  "169.254.169.254",
		"mixed.example.com": "10.1.2.3 203.0.113.10",
		"mapped.example":    "::ffff:127.0.0.1",
		"nat64.example":     "64:ff9b::a01:203",
		"db.corp":           "10.20.0.5",
		"v6.example":        "2001:db8::7 203.0.113.11",
	}
	all := func(hosts ...string) Policy { return Policy{Mode: ModeAll, Hosts: hosts} }
	list := func(ports []uint16, hosts ...string) Policy {
		return Policy{Mode: ModeList, Ports: ports, Hosts: hosts}
	}
	deny := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7777"), netip.MustParseAddrPort("[::]:7000")}
	tests := []struct {
		name     string
		pol      Policy
		host     string
		port     uint16
		want     string // the addresses dialed, space-separated, or "refused"
		reason   string // a part of the refusal's reason
		allow    string // the refusal's Allow
		addr     string // the refusal's Addr
		resolved bool   // the resolver was asked
	}{
		{"all public name", all(), "api.example.com", 443, "203.0.113.7", "", "", "", true},
		{"all public address", all(), "203.0.113.7", 22, "203.0.113.7", "", "", "", false},
		{"all loopback refused", all(), "127.0.0.1", 8080, "refused", "127.0.0.1 is a loopback address", "127.0.0.1:8080", "127.0.0.1", false},
		{"all localhost refused", all(), "localhost", 11434, "refused", "loopback", "localhost:11434", "127.0.0.1", false},
		{"all ipv6 loopback refused", all(), "::1", 80, "refused", "::1 is a loopback address", "[::1]:80", "::1", false},
		{"all private refused", all(), "10.0.0.5", 8080, "refused", "a private address", "10.0.0.5:8080", "10.0.0.5", false},
		{"all metadata refused", all(), "169.254.169.254", 80, "refused", "cloud metadata", "169.254.169.254:80", "169.254.169.254", false},
		{"all mapped loopback refused", all(), "::ffff:127.0.0.1", 80, "refused", "loopback", "127.0.0.1:80", "127.0.0.1", false},
		{"all nat64 private refused", all(), "64:ff9b::a00:5", 80, "refused", "a private address", "[64:ff9b::a00:5]:80", "64:ff9b::a00:5", false},
		{"all rebinding to loopback", all(), "evil.example.com", 443, "refused", "evil.example.com resolves to 127.0.0.1, a loopback address", "127.0.0.1:443", "127.0.0.1", true},
		{"all rebinding to private", all(), "intra.example.com", 443, "refused", "resolves to 10.1.2.3, a private address", "10.1.2.3:443", "10.1.2.3", true},
		{"all rebinding to metadata", all(), "meta.example.com", 80, "refused", "cloud metadata", "169.254.169.254:80", "169.254.169.254", true},
		{"all mapped rebinding", all(), "mapped.example", 80, "refused", "loopback", "127.0.0.1:80", "127.0.0.1", true},
		{"all nat64 rebinding", all(), "nat64.example", 80, "refused", "a private address", "[64:ff9b::a01:203]:80", "64:ff9b::a01:203", true},
		{"all mixed keeps the public one", all(), "mixed.example.com", 443, "203.0.113.10", "", "", "", true},
		{"both families", all(), "v6.example", 443, "2001:db8::7 203.0.113.11", "", "", "", true},
		{"name entry still refuses loopback", list(nil, "evil.example.com"), "evil.example.com", 443, "refused", "a name entry allows public addresses only", "127.0.0.1:443", "127.0.0.1", true},
		// A local model server named by a name of its own: the address
		// entry, or localhost, with its port, allows the name too.
		{"name to loopback, address entry", list(nil, "127.0.0.1:8080"), "evil.example.com", 8080, "127.0.0.1", "", "", "", true},
		{"name to loopback, localhost entry", list(nil, "localhost:8080"), "evil.example.com", 8080, "127.0.0.1", "", "", "", true},
		{"name to loopback, another port", list(nil, "127.0.0.1:8080"), "evil.example.com", 8081, "refused", "not on the allow-list", "evil.example.com:8081", "", false},
		{"name to private, address entry", list(nil, "10.1.2.3:5432"), "intra.example.com", 5432, "10.1.2.3", "", "", "", true},
		{"wildcard entry still refuses private", list(nil, "*.example.com:443"), "intra.example.com", 443, "refused", "a name entry allows public addresses only", "10.1.2.3:443", "10.1.2.3", true},
		{"address entry allows the private resolution", list(nil, "10.1.2.3:443"), "intra.example.com", 443, "10.1.2.3", "", "", "", true},
		{"range entry allows a private name", list(nil, "10.0.0.0/8:5432"), "db.corp", 5432, "10.20.0.5", "", "", "", true},
		{"range entry other port", list(nil, "10.0.0.0/8:5432"), "db.corp", 22, "refused", "not on the allow-list", "db.corp:22", "", false},
		{"loopback entry", all("127.0.0.1:8080"), "127.0.0.1", 8080, "127.0.0.1", "", "", "", false},
		{"loopback entry other port", all("127.0.0.1:8080"), "127.0.0.1", 8081, "refused", "loopback", "127.0.0.1:8081", "127.0.0.1", false},
		{"localhost entry by name", list(nil, "localhost:11434"), "localhost", 11434, "127.0.0.1 ::1", "", "", "", false},
		{"localhost entry by address", list(nil, "localhost:11434"), "127.0.0.1", 11434, "127.0.0.1", "", "", "", false},
		{"localhost entry by ipv6", list(nil, "localhost"), "::1", 9, "::1", "", "", "", false},
		{"localhost entry not private", list(nil, "localhost"), "10.0.0.1", 9, "refused", "a private address", "10.0.0.1:9", "10.0.0.1", false},
		{"ipv6 entry", all("[::1]:8080"), "::1", 8080, "::1", "", "", "", false},
		{"cidr entry", all("10.0.0.0/8"), "10.9.8.7", 1, "10.9.8.7", "", "", "", false},
		{"cidr entry outside", all("10.0.0.0/8"), "192.168.0.1", 1, "refused", "a private address", "192.168.0.1:1", "192.168.0.1", false},
		{"wildcard matches a subdomain", list(nil, "*.example.com"), "api.example.com", 8443, "203.0.113.7", "", "", "", true},
		{"wildcard matches a deeper subdomain", list(nil, "*.example.com:443"), "a.b.example.com", 443, "203.0.113.9", "", "", "", true},
		{"wildcard not the apex", list(nil, "*.example.com"), "example.com", 443, "refused", "not on the allow-list", "example.com:443", "", false},
		{"wildcard not a lookalike", list(nil, "*.example.com"), "badexample.com", 443, "refused", "not on the allow-list", "badexample.com:443", "", false},
		{"name entry with port", list(nil, "api.example.com:443"), "api.example.com", 443, "203.0.113.7", "", "", "", true},
		{"name entry other port", list(nil, "api.example.com:443"), "api.example.com", 80, "refused", "not on the allow-list", "api.example.com:80", "", false},
		{"name entry any port", list(nil, "api.example.com"), "API.Example.com.", 22, "203.0.113.7", "", "", "", true},
		{"name entry not an address", list(nil, "api.example.com"), "203.0.113.7", 443, "refused", "not on the allow-list", "203.0.113.7:443", "203.0.113.7", false},
		{"list port on a public name", list([]uint16{443}), "example.com", 443, "203.0.113.8", "", "", "", true},
		{"list port on a public address", list([]uint16{443}), "203.0.113.7", 443, "203.0.113.7", "", "", "", false},
		{"list other port", list([]uint16{443}), "example.com", 80, "refused", "not on the allow-list", "example.com:80", "", false},
		{"list port not loopback", list([]uint16{443}), "127.0.0.1", 443, "refused", "loopback", "127.0.0.1:443", "127.0.0.1", false},
		{"list port not a rebinding", list([]uint16{443}), "evil.example.com", 443, "refused", "resolves to 127.0.0.1", "127.0.0.1:443", "127.0.0.1", true},
		{"none", Policy{Mode: ModeNone}, "api.example.com", 443, "refused", `network is "none"`, "api.example.com:443", "", false},
		{"none ignores entries", Policy{Mode: ModeNone, Hosts: []string{"api.example.com"}}, "api.example.com", 443, "refused", `"none"`, "api.example.com:443", "", false},
		{"none address", Policy{Mode: ModeNone}, "203.0.113.7", 443, "refused", `"none"`, "203.0.113.7:443", "203.0.113.7", false},
		{"daemon port", all("127.0.0.1", "localhost"), "127.0.0.1", 7777, "refused", "127.0.0.1:7777 is the daemon's own address", "127.0.0.1:7777", "127.0.0.1", false},
		{"daemon port by a range", all("127.0.0.0/8:7777"), "127.0.0.1", 7777, "refused", "daemon's own", "127.0.0.1:7777", "127.0.0.1", false},
		{"daemon port named exactly", all("127.0.0.1:7777"), "127.0.0.1", 7777, "127.0.0.1", "", "", "", false},
		{"daemon port named as localhost", all("localhost:7777"), "localhost", 7777, "127.0.0.1 ::1", "", "", "", false},
		{"daemon port other loopback", all("127.0.0.0/8"), "127.0.0.2", 7777, "127.0.0.2", "", "", "", false},
		{"daemon unspecified listen", all(), "203.0.113.7", 7000, "refused", "daemon's own", "203.0.113.7:7000", "203.0.113.7", false},
		{"unknown name", all(), "nowhere.example", 443, "error", "", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, names, func(c *Config) { c.Deny = deny })
			r, err := compile(tt.pol)
			if err != nil {
				t.Fatalf("compile(%+v) error = %v", tt.pol, err)
			}
			tg, err := makeTarget(tt.host, tt.port)
			if err != nil {
				t.Fatalf("makeTarget(%q, %d) error = %v", tt.host, tt.port, err)
			}
			addrs, ref, err := e.p.route(context.Background(), r, tg)
			var got string
			switch {
			case err != nil:
				got = "error"
			case ref != nil:
				got = "refused"
			default:
				got = strings.Trim(fmt.Sprint(addrs), "[]")
			}
			if got != tt.want {
				t.Fatalf("route(%s) = %q (refusal %+v, err %v); want %q", tg, got, ref, err, tt.want)
			}
			if ref != nil {
				if !strings.Contains(ref.Reason, tt.reason) || ref.Allow != tt.allow || ref.Addr != tt.addr || ref.Port != tt.port {
					t.Errorf("route(%s) refusal = %+v; want reason ~ %q, Allow %q, Addr %q", tg, *ref, tt.reason, tt.allow, tt.addr)
				}
			}
			if asked := slices.Contains(e.res.asked(), tg.name); asked != tt.resolved {
				t.Errorf("route(%s): resolver asked = %v; want %v", tg, asked, tt.resolved)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		pol  Policy
		want string
	}{
		{Policy{}, `unknown mode ""`},
		{Policy{Mode: "ports"}, `unknown mode "ports"`},
		{Policy{Mode: ModeList, Ports: []uint16{0}}, "port 0"},
		{Policy{Mode: ModeList, Hosts: []string{"ok.example", "https://x"}}, `host "https://x": a URL`},
	}
	for _, tt := range tests {
		if _, err := compile(tt.pol); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("compile(%+v) error = %v; want %q", tt.pol, err, tt.want)
		}
	}
}

func TestRefusalString(t *testing.T) {
	r := Refusal{Host: "api.example.com", Port: 443, Reason: "not on the allow-list", Allow: "api.example.com:443"}
	want := `agentpool egress: connection to api.example.com:443 refused: not on the allow-list; the entry "api.example.com:443" in the provider's sandbox.network would allow it`
	if got := r.String(); got != want {
		t.Errorf("Refusal.String() = %q; want %q", got, want)
	}
	r = Refusal{Host: "::1", Port: 80, Reason: "r"}
	if got := r.String(); !strings.HasPrefix(got, "agentpool egress: connection to [::1]:80 refused: r") || strings.Contains(got, "entry") {
		t.Errorf("Refusal.String() = %q; want the IPv6 host in brackets and no entry", got)
	}
}
