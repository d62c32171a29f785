package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/registry"
)

// TestSandboxLabel: a provider's SANDBOX cell says "confined" where agents
// get namespaces, "landlock only" where they do not (and that a host list
// is then not enforced), and refuses a required sandbox the machine
// cannot give.
func TestSandboxLabel(t *testing.T) {
	ns := &sandbox.Status{Containment: "cgroup", Landlock: 6, Namespaces: true}
	only := &sandbox.Status{Containment: "cgroup", Landlock: 6, NamespacesError: "namespaces are off for this daemon"}
	old := &sandbox.Status{Containment: "cgroup", Landlock: 3}
	none := &sandbox.Status{Containment: "subreaper"}
	all := backends.SandboxSpec{Enabled: true, Network: backends.NetworkAll}
	list := backends.SandboxSpec{Enabled: true, Network: backends.NetworkList, Ports: []uint16{443}, Hosts: []string{"api.example.com:443"}}
	ports := backends.SandboxSpec{Enabled: true, Network: backends.NetworkList, Ports: []uint16{443, 80}}
	required := all
	required.Required = true
	for _, tc := range []struct {
		name string
		sb   backends.SandboxSpec
		st   *sandbox.Status
		want string
	}{
		{"off", backends.SandboxSpec{}, ns, "off"},
		{"namespaces", all, ns, "confined net:all"},
		{"namespaces list", list, ns, "confined net:443,api.example.com:443"},
		{"namespaces required", required, ns, "confined net:all required"},
		{"landlock only", all, only, "landlock only net:all"},
		{"landlock only hosts", list, only, "landlock only net:443,api.example.com:443 (NOT enforced: hosts need namespaces)"},
		{"landlock only ports", ports, only, "landlock only net:443,80"},
		{"landlock only old kernel", ports, old, "landlock only net:443,80 (NOT enforced: Landlock ABI 3 < 4)"},
		{"landlock only required", required, only, "REFUSED (no namespaces)"},
		{"no landlock", all, none, "UNCONFINED (no Landlock)"},
		{"no landlock required", required, none, "REFUSED (no Landlock)"},
		{"daemon did not say", all, nil, "net:all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sandboxLabel(tc.sb, tc.st); got != tc.want {
				t.Errorf("sandboxLabel(%+v, %+v) = %q; want %q", tc.sb, tc.st, got, tc.want)
			}
		})
	}
}

// TestRenderProvidersConfinement: providers list says "namespaces" or
// "Landlock only" on its confinement line; Landlock only comes with what
// agents can reach, why and how to fix it; the connections a provider's
// agents were refused are listed with the list to write.
func TestRenderProvidersConfinement(t *testing.T) {
	when := time.Date(2025, 3, 1, 12, 0, 0, 0, time.Local)
	codex := registry.ProviderStatus{ID: "codex", Kind: backends.KindACP, Enabled: true, Status: registry.StatusReady, Command: []string{"codex-acp"},
		Sandbox: backends.SandboxSpec{Enabled: true, Network: backends.NetworkList, Hosts: []string{"api.openai.com:443"}},
		NetworkRefused: []registry.NetworkRefusal{
			{Host: "evil.example", Port: 443, Reason: "not on the allow-list", Allow: "evil.example:443", Session: "s-1", Time: when},
			{Host: "db.internal", Port: 5432, Addr: "10.1.2.3", Reason: "db.internal resolves to 10.1.2.3, a private address", Allow: "10.1.2.3:5432", Time: when.Add(-time.Minute)},
		}}
	claude := registry.ProviderStatus{ID: "claude", Kind: backends.KindACP, Enabled: true, Status: registry.StatusReady, Command: []string{"claude-agent-acp"},
		Sandbox:        backends.SandboxSpec{Enabled: true, Network: backends.NetworkAll},
		NetworkRefused: []registry.NetworkRefusal{{Host: "::1", Port: 8080, Addr: "::1", Reason: "::1 is a loopback address", Allow: "[::1]:8080", Session: "s-2", Time: when}}}
	snap := registry.Snapshot{Providers: []registry.ProviderStatus{claude, codex}}

	only := &sandbox.Status{Containment: "cgroup", Cgroup: "/sys/fs/cgroup/agentpool-x", Landlock: 6, NamespacesError: "namespaces are off for this daemon"}
	only.Warnings = []string{sandbox.LandlockOnlyWarning + " (" + only.NamespacesError + ")"}
	var out bytes.Buffer
	c := &cli{stdout: &out, stderr: &out, confine: only}
	c.renderProviders(snap)
	got := out.String()
	what, fix, _ := strings.Cut(sandbox.LandlockOnlyWarning, "; ")
	for _, want := range []string{
		"confinement: cgroup (/sys/fs/cgroup/agentpool-x), Landlock ABI 6, Landlock only (no namespaces)\n",
		"  warning: " + what + "\n      why: namespaces are off for this daemon\n      fix: " + fix + "\n",
		"landlock only net:api.openai.com:443 (NOT enforced: hosts need namespaces)",
		"\nnetwork refused (the newest first):\n",
		"  codex: evil.example:443 (not on the allow-list), " + when.Format(time.DateTime) + " in session s-1\n" +
			`      allow it with "sandbox.network": ["api.openai.com:443", "evil.example:443"]` + "\n",
		"  codex: db.internal:5432 (db.internal resolves to 10.1.2.3, a private address), " + when.Add(-time.Minute).Format(time.DateTime) + "\n" +
			`      allow it with "sandbox.network": ["api.openai.com:443", "10.1.2.3:5432"]` + "\n",
		"  claude: [::1]:8080 (::1 is a loopback address), " + when.Format(time.DateTime) + " in session s-2\n" +
			`      allow it with a list in place of "all", which allows only what it names: "sandbox.network": [443, "[::1]:8080"]` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("providers list on a Landlock-only machine =\n%s\nwant it to contain\n%s", got, want)
		}
	}
	if !strings.HasPrefix(what, "Landlock only: agents can reach unix sockets and local services") {
		t.Errorf("the Landlock-only warning starts %q; want it to say what agents can reach", what)
	}

	out.Reset()
	c.confine = &sandbox.Status{Containment: "cgroup", Landlock: 6, Namespaces: true}
	c.renderProviders(registry.Snapshot{Providers: []registry.ProviderStatus{codex}})
	got = out.String()
	for _, want := range []string{"Landlock ABI 6, namespaces (the network through the egress proxy only)\n", "confined net:api.openai.com:443"} {
		if !strings.Contains(got, want) {
			t.Errorf("providers list with namespaces =\n%s\nwant it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "warning") || strings.Contains(got, "Landlock only") {
		t.Errorf("providers list with namespaces =\n%s\nwant no warning", got)
	}
}

// TestRenderNetworkRefused: a prompt's live output shows a refused
// connection with what would allow it.
func TestRenderNetworkRefused(t *testing.T) {
	var out bytes.Buffer
	r := newRenderer(&out, &out, false)
	r.event(backends.Event{Type: wiring.EventNetworkRefused, Agent: "codex",
		Data: backends.MustJSON(wiring.NetworkRefusal{Host: "evil.example", Port: 443, Reason: "not on the allow-list", Allow: "evil.example:443"})})
	want := `agent codex: network refused: evil.example:443 (not on the allow-list); allow it with "sandbox.network": [..., "evil.example:443"]`
	if !strings.Contains(out.String(), want) {
		t.Errorf("rendered network.refused = %q; want %q", out.String(), want)
	}
}
