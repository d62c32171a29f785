package registry

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// TestNetworkRefused: a provider's status shows the last targets its
// agents were refused, newest first, each once, at most
// MaxNetworkRefused; a target refused again moves to the front, unless it
// was just recorded; refusals under another network setting are ignored;
// an edit of the network setting clears them, an edit of anything else
// keeps them.
func TestNetworkRefused(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	f.write(t, `{"version": 1, "providers": {"codex": {"sandbox": {"network": ["api.openai.com:443"]}}}}`)
	cfg := f.config()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg.Now = func() time.Time { return now }
	r := open(t, cfg)
	spec, err := r.Resolve("codex")
	if err != nil {
		t.Fatal(err)
	}
	sb := spec.Sandbox
	refusal := func(host string) NetworkRefusal {
		return NetworkRefusal{Host: host, Port: 443, Reason: "not on the allow-list", Allow: host + ":443", Session: "s1"}
	}
	hosts := func() []string {
		p, _ := r.Snapshot().Provider("codex")
		var out []string
		for _, n := range p.NetworkRefused {
			out = append(out, n.Host)
		}
		return out
	}

	_, ch, cancel := r.Subscribe()
	defer cancel()
	r.NetworkRefused("codex", sb, refusal("evil.example"))
	if c := <-ch; !equalIDs(c.Updated, "codex") {
		t.Errorf("change after a refusal = %+v; want codex updated", c)
	}
	p, _ := r.Snapshot().Provider("codex")
	want := refusal("evil.example")
	want.Time = now
	if len(p.NetworkRefused) != 1 || p.NetworkRefused[0] != want {
		t.Fatalf("codex NetworkRefused = %+v; want [%+v]", p.NetworkRefused, want)
	}

	// Refused again at once: nothing changes.
	version := r.Snapshot().Version
	now = now.Add(NetworkRefusedQuiet / 2)
	r.NetworkRefused("codex", sb, refusal("evil.example"))
	if v := r.Snapshot().Version; v != version {
		t.Errorf("snapshot version = %d after the same refusal within %s; want %d (unchanged)", v, NetworkRefusedQuiet, version)
	}

	for i := 1; i <= MaxNetworkRefused; i++ {
		now = now.Add(time.Second)
		r.NetworkRefused("codex", sb, refusal(fmt.Sprintf("h%d.example", i)))
	}
	if got, want := fmt.Sprint(hosts()), "[h5.example h4.example h3.example h2.example h1.example]"; got != want {
		t.Errorf("codex NetworkRefused after %d more = %s; want %s", MaxNetworkRefused, got, want)
	}

	// h2 again, after the quiet time: to the front, not twice.
	now = now.Add(NetworkRefusedQuiet)
	r.NetworkRefused("codex", sb, refusal("h2.example"))
	if got, want := fmt.Sprint(hosts()), "[h2.example h5.example h4.example h3.example h1.example]"; got != want {
		t.Errorf("codex NetworkRefused after h2 again = %s; want %s", got, want)
	}
	if p, _ := r.Snapshot().Provider("codex"); !p.NetworkRefused[0].Time.Equal(now) {
		t.Errorf("h2's time = %v; want %v", p.NetworkRefused[0].Time, now)
	}

	// An agent started under another setting, and unknown providers.
	version = r.Snapshot().Version
	old := sb
	old.Hosts = nil
	r.NetworkRefused("codex", old, refusal("stale.example"))
	r.NetworkRefused("nosuch", sb, refusal("x.example"))
	if v := r.Snapshot().Version; v != version {
		t.Errorf("snapshot version = %d after refusals of another setting or provider; want %d (unchanged)", v, version)
	}

	// Another field changes: kept. The network changes: cleared.
	f.write(t, `{"version": 1, "providers": {"codex": {"env": {"A": "1"}, "sandbox": {"network": ["api.openai.com:443"]}}}}`)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := hosts(); len(got) != MaxNetworkRefused {
		t.Errorf("codex NetworkRefused after an env edit = %v; want the %d kept", got, MaxNetworkRefused)
	}
	f.write(t, `{"version": 1, "providers": {"codex": {"sandbox": {"network": ["api.openai.com:443", "h2.example:443"]}}}}`)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := hosts(); len(got) != 0 {
		t.Errorf("codex NetworkRefused after a network edit = %v; want none", got)
	}
}

// TestNetworkRefusedDefaultNetwork: a sandbox with no network mode is
// "all", the same setting as the registry's resolved spec.
func TestNetworkRefusedDefaultNetwork(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	r := open(t, f.config())
	r.NetworkRefused("codex", backends.SandboxSpec{Enabled: true}, NetworkRefusal{Host: "10.0.0.1", Port: 22, Reason: "a private address", Allow: "10.0.0.1:22"})
	if p, _ := r.Snapshot().Provider("codex"); len(p.NetworkRefused) != 1 {
		t.Errorf("codex NetworkRefused = %+v; want the refusal", p.NetworkRefused)
	}
}
