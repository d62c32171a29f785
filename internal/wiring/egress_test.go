package wiring

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/egress"
	"github.com/agentpool/agentpool/registry"
)

// TestEgressRefusals: a connection the proxy refuses becomes a
// network.refused event of the launch's session and is reported with the
// provider and the sandbox of the launch; a probe's, which has no
// session, is reported only.
func TestEgressRefusals(t *testing.T) {
	type report struct {
		provider string
		sb       backends.SandboxSpec
		r        registry.NetworkRefusal
	}
	reports := make(chan report, 4)
	e := &Egress{Dir: t.TempDir(), Report: func(provider string, sb backends.SandboxSpec, r registry.NetworkRefusal) {
		reports <- report{provider, sb, r}
	}}
	p, err := egress.New(egress.Config{OnRefused: e.Refused, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.Proxy = p
	t.Cleanup(func() { _ = p.Close() })
	sb := backends.SandboxSpec{Enabled: true, Network: backends.NetworkList, Hosts: []string{"api.example.com:443"}}
	events := make(chan backends.Event, 4)

	for _, tc := range []struct {
		name, session string
		emit          func(backends.Event)
	}{
		{"launch", "s1", func(ev backends.Event) { events <- ev }},
		{"probe", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			view, closeFn, err := e.open(sb, egress.Meta{Session: "s1", Provider: "codex"}, tc.emit)
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			if view.Network != backends.NetworkList {
				t.Errorf("the view's network = %q; want %q, the mode the proxy enforces", view.Network, backends.NetworkList)
			}
			c, err := net.Dial("unix", view.Socket)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = c.Write([]byte("CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n"))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("CONNECT evil.example:443 = %s; want 403", resp.Status)
			}
			want := registry.NetworkRefusal{Host: "evil.example", Port: 443, Allow: "evil.example:443", Session: tc.session}
			select {
			case got := <-reports:
				got.r.Reason = ""
				if got.provider != "codex" || !sameSandbox(got.sb, sb) || got.r != want {
					t.Errorf("report = %q %+v %+v; want codex, the launch's sandbox, %+v", got.provider, got.sb, got.r, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no report of the refusal")
			}
			if tc.emit == nil {
				return
			}
			select {
			case ev := <-events:
				var d NetworkRefusal
				if ev.Type != EventNetworkRefused || json.Unmarshal(ev.Data, &d) != nil || d.Host != "evil.example" || d.Allow != "evil.example:443" || d.Reason == "" {
					t.Errorf("event = %s %s; want network.refused of evil.example:443 with a reason", ev.Type, ev.Data)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no network.refused event")
			}
		})
	}
}

func sameSandbox(a, b backends.SandboxSpec) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
