package main

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/registry"
)

// BenchmarkAgentStartConfined times an agent's start — spawn, initialize
// and session/new of the built binary's demo agent — plain, in a cgroup of
// its own, in a cgroup under Landlock through the real launcher (the built
// binary's sandbox-exec), and there in namespaces of its own (the view,
// its own PID and network namespaces), interleaved in one run. It reports
// each variant's median and what confinement adds to it.
func BenchmarkAgentStartConfined(b *testing.B) {
	bin := agentpoolBinary(b)
	dir := b.TempDir()
	spec := backends.Spec{Provider: "demo", Kind: backends.KindACP, Path: bin, Args: []string{registry.DemoAgentArg}, Dir: dir,
		Sandbox: backends.SandboxSpec{Enabled: true}}
	ll, ns := benchManagers(b, bin, dir)
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: spec.Sandbox, Worktree: dir, Exe: bin, PATH: os.Getenv("PATH"), Home: os.Getenv("HOME")})
	jail := func(m *sandbox.Manager, name string, pol *sandbox.Policy) func() backends.Jail {
		return func() backends.Jail {
			j, err := m.NewJail(sandbox.JailConfig{Path: []string{"bench", name}, Policy: pol, Session: "bench", TmpRoot: dir + ".tmp"})
			if err != nil {
				b.Fatal(err)
			}
			return j
		}
	}
	variants := []struct {
		name string
		jail func() backends.Jail
	}{
		{"plain", func() backends.Jail { return nil }},
		{"cgroup", jail(ll, "cgroup", nil)},
		{"cgroup+landlock", jail(ll, "landlock", &pol)},
		{"cgroup+landlock+namespaces", jail(ns, "ns", &pol)},
	}
	times := make([][]time.Duration, len(variants))
	once := func(i int) {
		j := variants[i].jail()
		cfg := acp.Config{Spec: spec}
		if j != nil {
			cfg.Jail = j
		}
		be, err := acp.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t0 := time.Now()
		_, err = be.Start(ctx, "")
		d := time.Since(t0)
		cancel()
		if err != nil {
			b.Fatalf("%s: start: %v", variants[i].name, err)
		}
		times[i] = append(times[i], d)
		stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = be.Stop(stop)
		cancel()
	}
	for i := range variants {
		once(i) // warm the page cache
		times[i] = nil
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := range variants {
			once(i)
		}
	}
	b.StopTimer()
	med := make([]time.Duration, len(variants))
	for i, ts := range times {
		sort.Slice(ts, func(a, c int) bool { return ts[a] < ts[c] })
		med[i] = ts[len(ts)/2]
		b.ReportMetric(float64(med[i].Microseconds())/1000, "ms-median-"+variants[i].name)
	}
	b.ReportMetric(float64((med[2]-med[0]).Microseconds())/1000, "ms-added-by-landlock")
	b.ReportMetric(float64((med[3]-med[0]).Microseconds())/1000, "ms-added-by-confinement")
	b.ReportMetric(float64(med[3])/float64(med[0]), "confined/plain")
}

// benchManagers opens two Managers using the built binary as launcher:
// one running programs under Landlock only, one in namespaces too. It
// skips the benchmark where the machine allows neither.
func benchManagers(b *testing.B, bin, dir string) (landlockOnly, namespaces *sandbox.Manager) {
	open := func(name string, noNS bool) *sandbox.Manager {
		m, err := sandbox.Open(sandbox.Config{Name: "agentpool-bench-" + name + filepath.Base(dir), Launcher: []string{bin, sandbox.LauncherCommand}, NoNamespaces: noNS})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _, _ = m.Sweep(); _ = m.Close(); _ = os.Remove(m.Status().Cgroup) })
		return m
	}
	landlockOnly, namespaces = open("ll-", true), open("ns-", false)
	if st := namespaces.Status(); st.Containment != sandbox.ContainCgroup || st.Landlock == 0 || !st.Namespaces {
		b.Skipf("needs cgroups, Landlock and namespaces: %+v", st)
	}
	return landlockOnly, namespaces
}

// BenchmarkWarmTurnConfined times warm turns of the scripted fake agent,
// one backend plain, one in a cgroup under Landlock and one there in
// namespaces of its own, prompted in turn in one run: confinement must
// leave a warm turn unchanged.
func BenchmarkWarmTurnConfined(b *testing.B) {
	bin := agentpoolBinary(b)
	dir := b.TempDir()
	ll, ns := benchManagers(b, bin, dir)
	spec := agenttest.Spec("fake", agenttest.Script{})
	spec.Dir = dir
	spec.Sandbox = backends.SandboxSpec{Enabled: true}
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: spec.Sandbox, Worktree: dir, Exe: spec.Path, PATH: os.Getenv("PATH"), Home: os.Getenv("HOME")})
	var jails []backends.Jail
	for i, m := range []*sandbox.Manager{ll, ns} {
		j, err := m.NewJail(sandbox.JailConfig{Path: []string{"bench", "warm" + strconv.Itoa(i)}, Policy: &pol, Session: "bench", TmpRoot: dir + ".tmp"})
		if err != nil {
			b.Fatal(err)
		}
		jails = append(jails, j)
	}
	var bes [3]*acp.Backend
	for i, jail := range []backends.Jail{nil, jails[0], jails[1]} {
		cfg := acp.Config{Spec: spec}
		if jail != nil {
			cfg.Jail = jail
		}
		be, err := acp.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if _, err := be.Start(ctx, ""); err != nil {
			b.Fatal(err)
		}
		cancel()
		bes[i] = be
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = be.Stop(ctx)
		}()
	}
	if c := bes[2].Info().Confinement; c.Landlock == 0 || c.Containment != sandbox.ContainCgroup || !c.Namespaces {
		b.Fatalf("the confined backend is not confined: %+v", c)
	}
	times := [3][]time.Duration{}
	turn := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		t0 := time.Now()
		if _, err := bes[i].Prompt(ctx, backends.Prompt{Text: "hi", Turn: 1}, func(backends.Event) {}); err != nil {
			b.Fatal(err)
		}
		times[i] = append(times[i], time.Since(t0))
	}
	for i := 0; i < 30; i++ {
		turn(i % 3)
	}
	times = [3][]time.Duration{}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		turn(0)
		turn(1)
		turn(2)
	}
	b.StopTimer()
	var med [3]time.Duration
	for i, ts := range times {
		sort.Slice(ts, func(a, c int) bool { return ts[a] < ts[c] })
		med[i] = ts[len(ts)/2]
	}
	b.ReportMetric(float64(med[0].Microseconds()), "us-median-plain")
	b.ReportMetric(float64(med[1].Microseconds()), "us-median-landlock")
	b.ReportMetric(float64(med[2].Microseconds()), "us-median-confined")
	b.ReportMetric(float64(med[2])/float64(med[0]), "confined/plain")
}
