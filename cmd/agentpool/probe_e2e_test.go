package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/registry"
)

// noCaps is the CapEff line of /proc/self/status of a process without
// capabilities.
const noCaps = "CapEff:\t0000000000000000"

// probeReport is what a probed fake agent wrote of itself, read from the
// directory its sandbox grants for writing.
type probeReport struct {
	nnp, caps, cgroup, token, outside string
}

// probeScript is a fake agent that, at start (so when it is probed),
// writes NoNewPrivs, its effective capabilities and its cgroup to out, tries to read the daemon's
// token and to write into outside (writing what came of each to out), and
// leaves a setsid sleeper behind (its pid appended to out/pids).
func probeScript(out, token, outside string) agenttest.Script {
	sh := `set -u; out="$1"
grep NoNewPrivs /proc/self/status > "$out/nnp"
grep CapEff /proc/self/status > "$out/caps"
grep '^0::' /proc/self/cgroup > "$out/cgroup"
if cat "$2" > /dev/null 2>&1; then echo read > "$out/token"; else echo denied > "$out/token"; fi
if echo x 2>/dev/null > "$3/escaped"; then echo wrote > "$out/outside"; else echo denied > "$out/outside"; fi`
	return agenttest.Script{StartSteps: []agenttest.Step{
		sys(agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"sh", "-c", sh, "sh", out, token, outside}}),
		sys(agenttest.SysOp{Op: agenttest.OpSetsidChild, Path: filepath.Join(out, "pids")}),
	}}
}

// writeProbeProviders writes providers.json with two fake agents running
// probeScript: "hostile" under the default sandbox (writing ~/.fake-agent
// only), and "owned", whose owner disabled the sandbox. Each reports to
// ~/.fake-agent/<id> and tries to write into <outside>/<id>.
func (f *confineFixture) writeProbeProviders(t *testing.T) {
	t.Helper()
	token := filepath.Join(f.home, tokenFileName)
	provider := func(id string, sandbox map[string]any) map[string]any {
		out, outside := filepath.Join(f.fakeHome, ".fake-agent", id), filepath.Join(f.outside, id)
		for _, dir := range []string{out, outside} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		raw, err := json.Marshal(probeScript(out, token, outside))
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(raw), "GORACE": "atexit_sleep_ms=0"}
		return map[string]any{"extends": "acp", "command": []string{f.exe}, "env": env, "sandbox": sandbox}
	}
	doc := map[string]any{"version": 1, "providers": map[string]any{
		"hostile": provider("hostile", map[string]any{"write": []string{"~/.fake-agent"}, "network": "none"}),
		"owned":   provider("owned", map[string]any{"enabled": false}),
	}}
	b, _ := json.MarshalIndent(doc, "", "  ")
	if err := os.WriteFile(filepath.Join(f.home, providersFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// probeNow probes provider id through the API and returns what its agent
// reported.
func (f *confineFixture) probeNow(t *testing.T, d *daemon, id string) probeReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info, err := d.client.ProbeProvider(ctx, id)
	if err != nil {
		t.Fatalf("probe %s: %v\ndaemon log:\n%s", id, err, d.out)
	}
	t.Logf("probe of %s took %v", id, info.Duration)
	out := filepath.Join(f.fakeHome, ".fake-agent", id)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("probe of %s: %v\ndaemon log:\n%s", id, err, d.out)
		}
		return strings.TrimSpace(string(b))
	}
	return probeReport{nnp: read("nnp"), caps: read("caps"), cgroup: read("cgroup"), token: read("token"), outside: read("outside")}
}

// cgroupTree returns the daemon's cgroup tree and its path as
// /proc/<pid>/cgroup shows it.
func cgroupTree(t *testing.T, home string) (dir, shown string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, "cgroup"))
	if err != nil {
		t.Fatalf("the daemon made no cgroup tree: %v", err)
	}
	dir = strings.TrimSpace(string(b))
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	// The tree's path relative to the cgroup2 mount that holds it.
	for _, line := range strings.Split(string(mi), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 || !strings.Contains(line, " - cgroup2 ") {
			continue
		}
		if rel, ok := strings.CutPrefix(dir, fields[4]+"/"); ok {
			return dir, "/" + rel
		}
	}
	t.Fatalf("cannot place %s in the cgroup2 mount", dir)
	return "", ""
}

// cgroupsUnder counts the cgroups below dir.
func cgroupsUnder(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != dir {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestProbeRunsConfined drives the real binary: the probe of a provider
// (when the config loads and on request) runs its command in a cgroup of
// the daemon's tree with NoNewPrivs and the provider's Landlock policy, so
// it can neither read the daemon's token nor write outside its grants,
// and leaves no process and no cgroup behind; a provider whose owner
// disabled the sandbox is probed without Landlock, as its agents run:
// only with NoNewPrivs and no capabilities, which every agent has.
func TestProbeRunsConfined(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	f := newConfineFixture(t)
	f.writeProbeProviders(t)
	d := f.start(t)
	if health(t, d).Containment != "cgroup" {
		agenttest.RequireFeature(t, false, "a writable cgroup v2")
	}
	tree, shown := cgroupTree(t, f.home)

	got := f.probeNow(t, d, "hostile")
	if got.nnp != "NoNewPrivs:\t1" || got.caps != noCaps {
		t.Errorf("probe ran with %q, %q; want NoNewPrivs 1 and no capabilities", got.nnp, got.caps)
	}
	if want := "0::" + shown + "/.probe-hostile"; got.cgroup != want {
		t.Errorf("probe ran in cgroup %q, want %q", got.cgroup, want)
	}
	if got.token != "denied" {
		t.Errorf("the probed agent could read the daemon's token (%s)", got.token)
	}
	if got.outside != "denied" {
		t.Errorf("the probed agent wrote outside its grants (%s)", got.outside)
	}
	if _, err := os.Stat(filepath.Join(f.outside, "hostile", "escaped")); err == nil {
		t.Error("a file appeared outside the probed agent's grants")
	}

	owned := f.probeNow(t, d, "owned")
	if owned.token != "read" || owned.outside != "wrote" {
		t.Errorf("a provider whose owner disabled the sandbox was probed confined: %+v", owned)
	}
	if _, err := os.Stat(filepath.Join(f.outside, "owned", "escaped")); err != nil {
		t.Errorf("the unsandboxed probe's write outside: %v; want the file there", err)
	}
	if owned.nnp != "NoNewPrivs:\t1" || owned.caps != noCaps {
		t.Errorf("unsandboxed probe ran with %q, %q; want NoNewPrivs 1 and no capabilities, as every agent", owned.nnp, owned.caps)
	}
	if want := "0::" + shown + "/.probe-owned"; owned.cgroup != want {
		t.Errorf("unsandboxed probe ran in cgroup %q, want %q (its agents get a cgroup too)", owned.cgroup, want)
	}

	// Every probe so far (at load and on request) left a setsid sleeper:
	// the probe's end killed each, and removed each probe's cgroup.
	f.checkSleepersGone(t, "hostile", "owned")
	waitNoProbes(t, d) // the built-in providers' probes at load too
	if left := cgroupsUnder(tree); len(left) != 0 {
		t.Errorf("probes left cgroups behind: %v", left)
	}
}

// waitNoProbes waits until no provider is being probed.
func waitNoProbes(t *testing.T, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap, err := d.client.Providers(context.Background())
		busy := err != nil
		for _, p := range snap.Providers {
			busy = busy || p.Status == registry.StatusProbing
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("probes still running: %+v, %v", snap, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkSleepersGone checks that the sleepers the probes of ids left
// behind were killed (killing those still alive).
func (f *confineFixture) checkSleepersGone(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		pids := waitPids(t, filepath.Join(f.fakeHome, ".fake-agent", id, "pids"), 1)
		for _, p := range pids {
			deadline := time.Now().Add(5 * time.Second)
			for agenttest.Alive(p) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if agenttest.Alive(p) {
				_ = agenttest.Kill(p, time.Second)
				t.Errorf("probe of %s left process %v running", id, p)
			}
		}
	}
}

// TestProbeRunsConfinedWithoutCgroup: where no cgroup can be made, a probe
// still runs under the provider's Landlock policy with NoNewPrivs, and
// what it leaves running is swept when it ends (the subreaper fallback).
func TestProbeRunsConfinedWithoutCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	f := newConfineFixture(t)
	f.parent = "none"
	f.writeProbeProviders(t)
	d := f.start(t)
	got := f.probeNow(t, d, "hostile")
	if got.nnp != "NoNewPrivs:\t1" || got.token != "denied" || got.outside != "denied" {
		t.Errorf("probe without a cgroup ran unconfined: %+v", got)
	}
	waitNoProbes(t, d)
	f.checkSleepersGone(t, "hostile", "owned")
}

// TestProbeExplainsSandboxRefusal: a probe whose agent fails to start
// because the sandbox denied it a file says so, as a failed launch does:
// its error names the path and the entry that would allow it.
func TestProbeExplainsSandboxRefusal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	f := newConfineFixture(t)
	needed := filepath.Join(f.outside, "settings.json")
	if err := os.WriteFile(needed, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	code := 3
	f.writeProvider(t, agenttest.Script{
		StartSteps:          []agenttest.Step{sys(agenttest.SysOp{Op: agenttest.OpRead, Path: needed})},
		ExitBeforeHandshake: &code,
	})
	d := f.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := d.client.ProbeProvider(ctx, "hostile")
	if err == nil {
		t.Fatalf("the probe of an agent that exits at start succeeded\n%s", d.out)
	}
	t.Logf("probe error: %v", err)
	for _, want := range []string{"sandbox: " + needed, "sandbox.read"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("probe error lacks %q:\n%v", want, err)
		}
	}
}
