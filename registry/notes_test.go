package registry

import (
	"slices"
	"testing"

	"github.com/agentpool/agentpool/backends"
)

// TestSandboxNotesAndLaunchReport: the notes Config.SandboxNotes gives
// are shown on the provider's status, computed once per spec; a launch
// report is shown until a launch with nothing to say, or a spec change,
// clears it.
func TestSandboxNotesAndLaunchReport(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	f.write(t, `{"version": 1, "providers": {"codex": {"sandbox": {"read": ["~/.ssh"]}}}}`)
	cfg := f.config()
	calls := 0
	note := backends.SandboxNote{Path: "/home/u/.ssh", Entry: backends.EntryRead, Reason: "is a secret: ~/.ssh"}
	cfg.SandboxNotes = func(spec backends.Spec) []backends.SandboxNote {
		calls++
		if slices.Contains(spec.Sandbox.Read, f.home+"/.ssh") {
			return []backends.SandboxNote{note}
		}
		return nil
	}
	r := open(t, cfg)
	p, _ := r.Snapshot().Provider("codex")
	if len(p.SandboxNotes) != 1 || p.SandboxNotes[0] != note {
		t.Fatalf("codex SandboxNotes = %+v; want %+v", p.SandboxNotes, note)
	}
	before := calls
	spec, err := r.Resolve("codex")
	if err != nil {
		t.Fatal(err)
	}
	spec.Dir = "/wt/s1"
	rep := LaunchReport{Session: "s1", Denied: []backends.SandboxNote{{Path: "/opt/x/cfg", Entry: backends.EntryRead, Reason: "denied", Grant: "/opt/x"}}}
	_, ch, cancel := r.Subscribe()
	defer cancel()
	r.SetLaunchReport("codex", spec, rep)
	if c := <-ch; !equalIDs(c.Updated, "codex") {
		t.Errorf("change after a launch report = %+v; want codex updated", c)
	}
	p, _ = r.Snapshot().Provider("codex")
	if p.LastLaunch == nil || p.LastLaunch.Session != "s1" || len(p.LastLaunch.Denied) != 1 {
		t.Fatalf("codex LastLaunch = %+v; want the report of s1", p.LastLaunch)
	}
	if calls != before {
		t.Errorf("SandboxNotes called %d more times for the same spec; want 0", calls-before)
	}
	r.SetLaunchReport("codex", spec, LaunchReport{Session: "s2"})
	if p, _ = r.Snapshot().Provider("codex"); p.LastLaunch != nil {
		t.Errorf("codex LastLaunch = %+v after a launch with nothing to say; want nil", p.LastLaunch)
	}
	r.SetLaunchReport("codex", spec, rep)
	f.write(t, `{"version": 1, "providers": {"codex": {"sandbox": {"read": []}}}}`)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if p, _ = r.Snapshot().Provider("codex"); p.LastLaunch != nil || len(p.SandboxNotes) != 0 {
		t.Errorf("codex after a spec change: LastLaunch %+v, SandboxNotes %+v; want neither", p.LastLaunch, p.SandboxNotes)
	}
}
