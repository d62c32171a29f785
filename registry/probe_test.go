package registry

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/google/go-cmp/cmp"
)

// fakeProber is a Prober whose behaviour is a function.
type fakeProber struct {
	probe func(ctx context.Context, spec backends.Spec) (backends.Info, error)

	mu    sync.Mutex
	calls []string
}

func (p *fakeProber) Probe(ctx context.Context, spec backends.Spec) (backends.Info, error) {
	p.mu.Lock()
	p.calls = append(p.calls, spec.Provider)
	p.mu.Unlock()
	return p.probe(ctx, spec)
}

func (p *fakeProber) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// clock is an injected Config.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestProbeOnDemand(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	clk := &clock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	var dirExisted bool
	var probedDir string
	prober := &fakeProber{probe: func(ctx context.Context, spec backends.Spec) (backends.Info, error) {
		fi, err := os.Stat(spec.Dir)
		dirExisted, probedDir = err == nil && fi.IsDir(), spec.Dir
		if err := spec.Validate(); err != nil {
			return backends.Info{}, err
		}
		return backends.Info{AgentName: "codex-acp", AgentVersion: "0.9.1", ProtocolVersion: 1,
			AuthMethods: []string{"chatgpt", "api-key"}, LoadSession: true,
			Modes: []backends.Mode{{ID: "auto", Name: "Auto"}}, CurrentMode: "auto",
			ConfigOptions: json.RawMessage(`[{"id":"model"}]`), Models: json.RawMessage(`{"current":"gpt"}`),
			Commands: json.RawMessage(`[{"name":"init"}]`)}, nil
	}}
	cfg := f.config()
	cfg.Prober, cfg.Now = prober, clk.Now
	r := open(t, cfg)
	got, err := r.Probe(context.Background(), "codex")
	if err != nil {
		t.Fatalf("Probe(codex) error = %v", err)
	}
	want := ProbeInfo{AgentName: "codex-acp", AgentVersion: "0.9.1", ProtocolVersion: 1,
		AuthMethods: []string{"chatgpt", "api-key"}, LoadSession: true,
		Modes: []backends.Mode{{ID: "auto", Name: "Auto"}}, CurrentMode: "auto",
		ConfigOptions: json.RawMessage(`[{"id":"model"}]`), Models: json.RawMessage(`{"current":"gpt"}`),
		Commands: json.RawMessage(`[{"name":"init"}]`), ProbedAt: clk.Now()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Probe(codex) mismatch (-want +got):\n%s", diff)
	}
	if !dirExisted {
		t.Error("the probe's directory did not exist during the probe")
	}
	if _, err := os.Stat(probedDir); !os.IsNotExist(err) {
		t.Errorf("the probe's directory %s is left behind: %v", probedDir, err)
	}
	p, _ := r.Snapshot().Provider("codex")
	if p.Status != StatusReady || p.Probe == nil || cmp.Diff(want, *p.Probe) != "" {
		t.Errorf("codex status after probe = %+v; want ready with the probe", p)
	}
}

func TestProbeOfAHangingAgentEndsAtItsTimeout(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	synctest.Test(t, func(t *testing.T) {
		prober := &fakeProber{probe: func(ctx context.Context, spec backends.Spec) (backends.Info, error) {
			<-ctx.Done() // an agent that never answers initialize
			return backends.Info{}, ctx.Err()
		}}
		cfg := f.config()
		cfg.Prober, cfg.ProbeTimeout = prober, 5*time.Second
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		start := time.Now()
		_, err = r.Probe(context.Background(), "codex")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 5s") {
			t.Errorf("Probe(hanging) error = %v; want a timeout naming 5s", err)
		}
		if took := time.Since(start); took != cfg.ProbeTimeout {
			t.Errorf("Probe(hanging) took %v; want %v", took, cfg.ProbeTimeout)
		}
		p, _ := r.Snapshot().Provider("codex")
		if p.Status != StatusError || !strings.Contains(p.Diagnostic, "probe failed") || p.Probe == nil || p.Probe.Error == "" {
			t.Errorf("codex after a hanging probe = %+v; want error status with the probe's error", p)
		}
		if _, err := r.Resolve("codex"); err != nil {
			t.Errorf("Resolve(codex) after a failed probe error = %v; want nil (a probe failure does not block launching)", err)
		}
	})
}

func TestProbeConcurrencyIsBounded(t *testing.T) {
	f := newFixture(t)
	f.install(t, "claude-agent-acp", "codex-acp", "gemini", "qwen", "opencode", "goose", "copilot", "agentpool", "aider", "claude")
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		active, peak := 0, 0
		release := make(chan struct{})
		prober := &fakeProber{probe: func(ctx context.Context, spec backends.Spec) (backends.Info, error) {
			mu.Lock()
			active++
			peak = max(peak, active)
			mu.Unlock()
			<-release
			mu.Lock()
			active--
			mu.Unlock()
			return backends.Info{AgentName: spec.Provider}, nil
		}}
		cfg := f.config()
		cfg.Prober, cfg.ProbeConcurrency = prober, 2
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		r.probeStale() // every installed ACP provider has no probe yet
		synctest.Wait()
		probing := 0
		for _, p := range r.Snapshot().Providers {
			if p.Status == StatusProbing {
				probing++
			}
		}
		mu.Lock()
		if active != 2 || probing != 8 {
			t.Errorf("with 8 stale ACP providers: %d probes running, %d shown probing; want 2 and 8", active, probing)
		}
		mu.Unlock()
		close(release)
		synctest.Wait()
		if peak != 2 || prober.count() != 8 {
			t.Errorf("probes: peak %d, total %d; want 2 and 8 (PTY providers are not probed)", peak, prober.count())
		}
		for _, p := range r.Snapshot().Providers {
			wantProbe := p.Kind == backends.KindACP
			if (p.Probe != nil) != wantProbe || p.Status != StatusReady {
				t.Errorf("%s after the probes: status %s, probe %v", p.ID, p.Status, p.Probe)
			}
		}
	})
}

func TestProbeIsSharedAndCachedWithTTL(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	synctest.Test(t, func(t *testing.T) {
		clk := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
		gate := make(chan struct{})
		prober := &fakeProber{probe: func(ctx context.Context, spec backends.Spec) (backends.Info, error) {
			<-gate
			return backends.Info{AgentName: "codex"}, nil
		}}
		cfg := f.config()
		cfg.Prober, cfg.Now, cfg.ProbeTTL = prober, clk.Now, time.Hour
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if _, err := r.Probe(context.Background(), "codex"); err != nil {
					t.Errorf("Probe(codex) error = %v", err)
				}
			})
		}
		synctest.Wait()
		close(gate)
		wg.Wait()
		if n := prober.count(); n != 1 {
			t.Fatalf("3 concurrent Probe calls ran %d probes; want 1", n)
		}
		clk.advance(59 * time.Minute)
		r.probeStale()
		synctest.Wait()
		if n := prober.count(); n != 1 {
			t.Errorf("probeStale within the TTL ran %d probes; want still 1", n)
		}
		clk.advance(2 * time.Minute)
		r.probeStale()
		synctest.Wait()
		if n := prober.count(); n != 2 {
			t.Errorf("probeStale past the TTL ran %d probes in all; want 2", n)
		}
	})
}

func TestProbeDroppedWhenSpecChanges(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	cfg := f.config()
	cfg.Prober = &fakeProber{probe: func(ctx context.Context, spec backends.Spec) (backends.Info, error) {
		return backends.Info{AgentName: "codex"}, nil
	}}
	r := open(t, cfg)
	if _, err := r.Probe(context.Background(), "codex"); err != nil {
		t.Fatal(err)
	}
	f.write(t, `{"version": 1, "providers": {"codex": {"label": "Renamed"}}}`)
	_ = r.Reload()
	if p, _ := r.Snapshot().Provider("codex"); p.Probe == nil {
		t.Error("a label change dropped the probe; want it kept")
	}
	f.write(t, `{"version": 1, "providers": {"codex": {"env": {"X": "1"}}}}`)
	_ = r.Reload()
	if p, _ := r.Snapshot().Provider("codex"); p.Probe != nil {
		t.Errorf("probe after a spec change = %+v; want nil", p.Probe)
	}
}

func TestProbeErrors(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp", "aider")
	f.write(t, `{"version": 1, "providers": {"codex": {"enabled": false}}}`)
	noProber := open(t, f.config())
	cfg := f.config()
	cfg.Prober = &fakeProber{probe: func(ctx context.Context, spec backends.Spec) (backends.Info, error) {
		return backends.Info{}, errors.New("authentication required")
	}}
	f.install(t, "gemini")
	r := open(t, cfg)
	tests := []struct {
		name string
		r    *Registry
		id   string
		want error
	}{
		{"unknown", r, "nope", ErrUnknown},
		{"disabled", r, "codex", ErrDisabled},
		{"not installed", r, "claude", ErrNotInstalled},
		{"pty", r, "aider", backends.ErrUnsupported},
		{"no prober", noProber, "gemini", ErrNoProber},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.r.Probe(context.Background(), tt.id); !errors.Is(err, tt.want) {
				t.Errorf("Probe(%q) error = %v; want %v", tt.id, err, tt.want)
			}
		})
	}
	_, err := r.Probe(context.Background(), "gemini")
	if err == nil || !strings.Contains(err.Error(), "authentication required") {
		t.Errorf("Probe(gemini) error = %v; want the prober's error", err)
	}
	if p, _ := r.Snapshot().Provider("gemini"); p.Probe == nil || p.Probe.Error == "" {
		t.Errorf("gemini after a failed probe = %+v; want the failure cached", p)
	}
}

func TestProbeOutlivesItsCaller(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		cfg := f.config()
		cfg.Prober = &fakeProber{probe: func(ctx context.Context, spec backends.Spec) (backends.Info, error) {
			<-gate
			return backends.Info{AgentName: "late"}, nil
		}}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := r.Probe(ctx, "codex"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Probe with a short context error = %v; want DeadlineExceeded", err)
		}
		close(gate)
		synctest.Wait()
		if p, _ := r.Snapshot().Provider("codex"); p.Probe == nil || p.Probe.AgentName != "late" {
			t.Errorf("codex after the caller left = %+v; want the probe's result cached", p)
		}
	})
}

func TestCloseStopsProbes(t *testing.T) {
	f := newFixture(t)
	f.install(t, "codex-acp")
	synctest.Test(t, func(t *testing.T) {
		cfg := f.config()
		cfg.Prober = &fakeProber{probe: func(ctx context.Context, spec backends.Spec) (backends.Info, error) {
			<-ctx.Done()
			return backends.Info{}, ctx.Err()
		}}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := r.Probe(context.Background(), "codex")
			errc <- err
		}()
		synctest.Wait()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Errorf("Probe interrupted by Close error = %v; want ErrClosed", err)
		}
		if _, err := r.Probe(context.Background(), "codex"); !errors.Is(err, ErrClosed) {
			t.Errorf("Probe after Close error = %v; want ErrClosed", err)
		}
	})
}

func TestRunProbesStaleProviders(t *testing.T) {
	for _, ttl := range []time.Duration{0, -1} {
		f := newFixture(t)
		f.install(t, "codex-acp")
		prober := &fakeProber{probe: func(ctx context.Context, spec backends.Spec) (backends.Info, error) {
			return backends.Info{AgentName: spec.Provider}, nil
		}}
		cfg := f.config()
		cfg.Prober, cfg.ProbeTTL = prober, ttl
		r := open(t, cfg)
		_, ch, cancel := r.Subscribe()
		run(t, r)
		if ttl >= 0 {
			waitUntil(t, r, ch, "an automatic probe", func(s Snapshot) bool {
				p, _ := s.Provider("codex")
				return p.Probe != nil && p.Probe.AgentName == "codex"
			})
		} else {
			noChange(t, ch, "Run with a negative ProbeTTL")
			if n := prober.count(); n != 0 {
				t.Errorf("Run with a negative ProbeTTL ran %d probes; want 0", n)
			}
		}
		cancel()
	}
}
