package egress

import (
	"io"
	"testing"
)

func TestSOCKS5(t *testing.T) {
	addr, port := echoServer(t)
	e := newEnv(t, map[string]string{"api.example.com": "203.0.113.7", "evil.example.com": "127.0.0.1"}, nil)
	e.dial.route("203.0.113.7:443", addr)
	e.dial.route("[2001:db8::7]:443", addr)
	l := e.listen(t, Policy{Mode: ModeList, Ports: []uint16{443}, Hosts: []string{"localhost:" + itoa(port)}})
	tests := []struct {
		name string
		cmd  byte
		atyp byte
		host string
		port uint16
		rep  byte
	}{
		{"domain", 1, 3, "api.example.com", 443, 0},
		{"localhost entry", 1, 3, "localhost", port, 0},
		{"ipv4 loopback entry", 1, 1, "127.0.0.1", port, 0},
		{"ipv6 public", 1, 4, "2001:db8::7", 443, 0},
		{"domain refused port", 1, 3, "api.example.com", 80, 2},
		{"domain rebinding", 1, 3, "evil.example.com", 443, 2},
		{"ipv4 refused", 1, 1, "10.0.0.1", 443, 2},
		{"ipv6 loopback refused", 1, 4, "::1", 443, 2},
		{"unknown name", 1, 3, "nowhere.example.com", 443, 4},
		{"bad name", 1, 3, "a b", 443, 1},
		{"bind", 2, 1, "127.0.0.1", port, 7},
		{"udp associate", 3, 1, "0.0.0.0", 0, 7},
		{"unknown address type", 1, 9, "", 443, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, c := socksVia(t, l, tt.cmd, tt.atyp, tt.host, tt.port)
			if rep != tt.rep {
				t.Fatalf("SOCKS5 %d to %s:%d reply = %#x; want %#x", tt.cmd, tt.host, tt.port, rep, tt.rep)
			}
			if rep == 0 {
				echoes(t, c, c, "socks "+tt.name)
				return
			}
			if n, err := c.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("after reply %#x: Read = %d, %v; want EOF", rep, n, err)
			}
		})
	}
}

func TestSOCKS5NoAcceptableMethod(t *testing.T) {
	e := newEnv(t, nil, nil)
	l := e.listen(t, Policy{Mode: ModeAll})
	c := dialSocket(t, l)
	c.Write([]byte{5, 1, 2}) // username/password only
	got, err := io.ReadAll(c)
	if string(got) != "\x05\xff" || err != nil {
		t.Errorf("SOCKS5 without no-auth: got %q, %v; want 05 ff then EOF", got, err)
	}
}

func TestSOCKS4Rejected(t *testing.T) {
	e := newEnv(t, nil, nil)
	l := e.listen(t, Policy{Mode: ModeAll})
	c := dialSocket(t, l)
	c.Write([]byte{4, 1, 0, 80, 127, 0, 0, 1, 0})
	got, _ := io.ReadAll(c)
	if len(got) != 8 || got[1] != 0x5b {
		t.Errorf("SOCKS4 request: got %x; want a rejection (5b)", got)
	}
}
