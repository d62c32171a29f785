package main

import (
	"context"
	"os"
	"path/filepath"
	"sort"
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
// its own, and in a cgroup under Landlock through the real launcher (the
// built binary's sandbox-exec), interleaved in one run. It reports each
// variant's median and what confinement adds to it.
func BenchmarkAgentStartConfined(b *testing.B) {
	bin := agentpoolBinary(b)
	dir := b.TempDir()
	spec := backends.Spec{Provider: "demo", Kind: backends.KindACP, Path: bin, Args: []string{registry.DemoAgentArg}, Dir: dir,
		Sandbox: backends.SandboxSpec{Enabled: true}}
	m, err := sandbox.Open(sandbox.Config{Name: "agentpool-bench-" + filepath.Base(dir), Launcher: []string{bin, sandbox.LauncherCommand}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _, _ = m.Sweep(); _ = m.Close(); _ = os.Remove(m.Status().Cgroup) }()
	if m.Status().Containment != sandbox.ContainCgroup || m.Status().Landlock == 0 {
		b.Skipf("needs cgroups and Landlock: %+v", m.Status())
	}
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: spec.Sandbox, Worktree: dir, Exe: bin, PATH: os.Getenv("PATH"), Home: os.Getenv("HOME")})
	variants := []struct {
		name string
		jail func() backends.Jail
	}{
		{"plain", func() backends.Jail { return nil }},
		{"cgroup", func() backends.Jail {
			j, err := m.NewJail(sandbox.JailConfig{Path: []string{"bench", "cgroup"}})
			if err != nil {
				b.Fatal(err)
			}
			return j
		}},
		{"cgroup+landlock", func() backends.Jail {
			j, err := m.NewJail(sandbox.JailConfig{Path: []string{"bench", "landlock"}, Policy: &pol})
			if err != nil {
				b.Fatal(err)
			}
			return j
		}},
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
	b.ReportMetric(float64((med[2]-med[0]).Microseconds())/1000, "ms-added-by-confinement")
	b.ReportMetric(float64(med[2])/float64(med[0]), "confined/plain")
}

// BenchmarkWarmTurnConfined times warm turns of the scripted fake agent,
// one backend plain and one in a cgroup under Landlock, prompted in turn in
// one run: confinement must leave a warm turn unchanged.
func BenchmarkWarmTurnConfined(b *testing.B) {
	bin := agentpoolBinary(b)
	dir := b.TempDir()
	m, err := sandbox.Open(sandbox.Config{Name: "agentpool-bench-" + filepath.Base(dir), Launcher: []string{bin, sandbox.LauncherCommand}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _, _ = m.Sweep(); _ = m.Close(); _ = os.Remove(m.Status().Cgroup) }()
	if m.Status().Containment != sandbox.ContainCgroup || m.Status().Landlock == 0 {
		b.Skipf("needs cgroups and Landlock: %+v", m.Status())
	}
	spec := agenttest.Spec("fake", agenttest.Script{})
	spec.Dir = dir
	spec.Sandbox = backends.SandboxSpec{Enabled: true}
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: spec.Sandbox, Worktree: dir, Exe: spec.Path, PATH: os.Getenv("PATH"), Home: os.Getenv("HOME")})
	j, err := m.NewJail(sandbox.JailConfig{Path: []string{"bench", "warm"}, Policy: &pol})
	if err != nil {
		b.Fatal(err)
	}
	var bes [2]*acp.Backend
	for i, jail := range []backends.Jail{nil, j} {
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
	if c := bes[1].Info().Confinement; c.Landlock == 0 || c.Containment != sandbox.ContainCgroup {
		b.Fatalf("the confined backend is not confined: %+v", c)
	}
	times := [2][]time.Duration{}
	turn := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		t0 := time.Now()
		if _, err := bes[i].Prompt(ctx, backends.Prompt{Text: "hi", Turn: 1}, func(backends.Event) {}); err != nil {
			b.Fatal(err)
		}
		times[i] = append(times[i], time.Since(t0))
	}
	for i := 0; i < 20; i++ {
		turn(i % 2)
	}
	times = [2][]time.Duration{}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		turn(0)
		turn(1)
	}
	b.StopTimer()
	var med [2]time.Duration
	for i, ts := range times {
		sort.Slice(ts, func(a, c int) bool { return ts[a] < ts[c] })
		med[i] = ts[len(ts)/2]
	}
	b.ReportMetric(float64(med[0].Microseconds()), "us-median-plain")
	b.ReportMetric(float64(med[1].Microseconds()), "us-median-confined")
	b.ReportMetric(float64(med[1])/float64(med[0]), "confined/plain")
}
