package egress

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseHost(t *testing.T) {
	pfx := netip.MustParsePrefix
	tests := []struct {
		in   string
		want Host
		str  string // canonical form; "" = in
	}{
		{"example.com", Host{Name: "example.com"}, ""},
		{"Example.COM.", Host{Name: "example.com"}, "example.com"},
		{"api.example.com:443", Host{Name: "api.example.com", Port: 443}, ""},
		{"*.example.com", Host{Name: "example.com", Wildcard: true}, ""},
		{"*.example.com:443", Host{Name: "example.com", Wildcard: true, Port: 443}, ""},
		{"localhost:11434", Host{Name: "localhost", Port: 11434}, ""},
		{"my_host.internal", Host{Name: "my_host.internal"}, ""},
		{"10.0.0.5", Host{Prefix: pfx("10.0.0.5/32")}, ""},
		{"10.0.0.5:8080", Host{Prefix: pfx("10.0.0.5/32"), Port: 8080}, ""},
		{"::1", Host{Prefix: pfx("::1/128")}, ""},
		{"[::1]", Host{Prefix: pfx("::1/128")}, "::1"},
		{"[::1]:8080", Host{Prefix: pfx("::1/128"), Port: 8080}, ""},
		{"::ffff:10.0.0.5", Host{Prefix: pfx("10.0.0.5/32")}, "10.0.0.5"},
		{"10.0.0.0/8", Host{Prefix: pfx("10.0.0.0/8")}, ""},
		{"10.0.0.0/8:5432", Host{Prefix: pfx("10.0.0.0/8"), Port: 5432}, ""},
		{"fd00::/8", Host{Prefix: pfx("fd00::/8")}, ""},
		{"[fd00::/8]:5432", Host{Prefix: pfx("fd00::/8"), Port: 5432}, ""},
		{"::ffff:192.168.0.0/112", Host{Prefix: pfx("192.168.0.0/16")}, "192.168.0.0/16"},
		{"10.1.2.3/32", Host{Prefix: pfx("10.1.2.3/32")}, "10.1.2.3"},
	}
	for _, tt := range tests {
		got, err := ParseHost(tt.in)
		if err != nil {
			t.Errorf("ParseHost(%q) error = %v; want nil", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
			t.Errorf("ParseHost(%q) (-want +got):\n%s", tt.in, diff)
		}
		str := tt.str
		if str == "" {
			str = tt.in
		}
		if got.String() != str {
			t.Errorf("ParseHost(%q).String() = %q; want %q", tt.in, got.String(), str)
		}
		if again, err := ParseHost(got.String()); err != nil || again != got {
			t.Errorf("ParseHost(%q) = %+v, %v; want %+v again", got.String(), again, err, got)
		}
	}
}

func TestParseHostErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty"},
		{" example.com", "space"},
		{"https://api.example.com", "a URL"},
		{"*", `"all" allows`},
		{"example.com:", `invalid port ""`},
		{"example.com:0", `invalid port "0"`},
		{"example.com:65536", `invalid port "65536"`},
		{"example.com:https", `invalid port "https"`},
		{"example.com:*", "leave the port out"},
		{"api.*.com", `"*" is allowed only`},
		{"*example.com", `"*" is allowed only`},
		{"*.com", "whole top-level domain"},
		{"exa mple.com", "space"},
		{"example.com/path", "not a valid range"},
		{"-bad.com", `starts or ends with "-"`},
		{"a..b", "empty label"},
		{"ex!ample.com", `character '!'`},
		{"443", "a number, not a host"},
		{"10.0.0", "not a valid IP address"},
		{"256.1.1.1", "not a valid IP address"},
		{"1.2.3.4.5", "not a valid IP address"},
		{"[10.0.0.1]:80", `brackets are for IPv6; write "10.0.0.1:80"`},
		{"[::1", `missing "]"`},
		{"[::1]8080", `unexpected "8080"`},
		{"fe80::1%eth0", "has a zone"},
		{"[::1]:", `invalid port ""`},
		{"10.1.2.3/8", `did you mean "10.0.0.0/8"?`},
		{"10.0.0.0/33", "not a valid range"},
		{"host.123", "neither a valid IP address nor a host name"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
	}
	for _, tt := range tests {
		_, err := ParseHost(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "host ") {
			t.Errorf("ParseHost(%q) error = %v; want one naming the entry and saying %q", tt.in, err, tt.want)
		}
	}
}

func TestPublic(t *testing.T) {
	tests := []struct {
		addr   string
		public bool
	}{
		{"93.184.216.34", true},
		{"2606:2800:220:1:248:1893:25c8:1946", true},
		{"127.0.0.1", false},
		{"127.9.9.9", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.32.0.1", true},
		{"192.168.1.1", false},
		{"100.64.0.1", false},
		{"100.128.0.1", true},
		{"169.254.169.254", false},
		{"169.254.1.1", false},
		{"fe80::1", false},
		{"fc00::1", false},
		{"fd12:3456::1", false},
		{"0.0.0.0", false},
		{"0.1.2.3", false},
		{"::", false},
		{"224.0.0.1", false},
		{"ff02::1", false},
		{"255.255.255.255", false},
		{"240.0.0.1", false},
		{"198.18.0.1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:93.184.216.34", true},
		{"64:ff9b::7f00:1", false},
		{"64:ff9b::a9fe:a9fe", false},
		{"64:ff9b::5db8:d822", true},
		{"64:ff9b:1::1", false},
		{"::127.0.0.1", false},
	}
	for _, tt := range tests {
		if got := Public(netip.MustParseAddr(tt.addr)); got != tt.public {
			t.Errorf("Public(%s) = %v; want %v (%s)", tt.addr, got, tt.public, class(netip.MustParseAddr(tt.addr)))
		}
	}
}
