package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/registry"
)

func fakeProvider(t *testing.T, s agenttest.Script) map[string]any {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(s)
	return map[string]any{"extends": "acp", "command": []string{exe},
		"env": map[string]string{agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(raw)}}
}

// The tier-2 probe through the real ACP prober against the scripted fake
// agent, and against one that hangs in initialize.
func TestProbeWithACPProber(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "providers.json")
	b, _ := json.Marshal(map[string]any{"version": 1, "providers": map[string]any{
		"fake": fakeProvider(t, agenttest.Script{AgentName: "probe-me", LoadSession: true,
			Modes:           []agenttest.Mode{{ID: "ask", Name: "Ask"}},
			BeforeNewAnswer: []agenttest.Step{{Update: json.RawMessage(`{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"init","description":"x"}]}`)}}}),
		"hang": fakeProvider(t, agenttest.Script{HangOnInitialize: true}),
	}})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := registry.New(registry.Config{Path: path, Prober: acp.Prober{}, ProbeTimeout: 2 * time.Second, ProbeTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	info, err := r.Probe(ctx, "fake")
	if err != nil {
		t.Fatalf("Probe(fake): %v", err)
	}
	if info.AgentName != "probe-me" || !info.LoadSession || len(info.Modes) != 1 || !strings.Contains(string(info.Commands), "init") {
		t.Fatalf("ProbeInfo = %+v", info)
	}
	st, ok := r.Snapshot().Provider("fake")
	if !ok || st.Probe == nil || st.Probe.AgentName != "probe-me" {
		t.Fatalf("snapshot probe = %+v", st.Probe)
	}
	start := time.Now()
	_, err = r.Probe(ctx, "hang")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Probe(hang) error = %v; want its timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("hanging probe took %v", d)
	}
}

// TestProbeDir: a probe works in an empty directory of its own under
// Config.ProbeDir (made when missing), removed after, so a daemon gives
// probes a directory it empties at start and a kill leaves nothing in the
// system's temporary directory.
func TestProbeDir(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "providers.json")
	b, _ := json.Marshal(map[string]any{"version": 1, "providers": map[string]any{
		"fake": fakeProvider(t, agenttest.Script{AgentName: "where"}),
	}})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	probeDir := filepath.Join(dir, "home", "tmp")
	var seen string
	prober := proberFunc(func(ctx context.Context, spec backends.Spec) (backends.Info, error) {
		seen = spec.Dir
		ents, err := os.ReadDir(spec.Dir)
		if err != nil || len(ents) != 0 {
			t.Errorf("probe directory %s: %v entries, %v; want an empty directory", spec.Dir, len(ents), err)
		}
		return acp.Prober{}.Probe(ctx, spec)
	})
	r, err := registry.New(registry.Config{Path: path, Prober: prober, ProbeTimeout: 5 * time.Second, ProbeTTL: -1, ProbeDir: probeDir})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Probe(context.Background(), "fake"); err != nil {
		t.Fatalf("Probe(fake): %v", err)
	}
	if filepath.Dir(seen) != probeDir {
		t.Errorf("probe ran in %q; want a directory of its own in %s", seen, probeDir)
	}
	if ents, err := os.ReadDir(probeDir); err != nil || len(ents) != 0 {
		t.Errorf("after the probe %s holds %d entries (%v); want none", probeDir, len(ents), err)
	}
}

// proberFunc adapts a function to registry.Prober.
type proberFunc func(ctx context.Context, spec backends.Spec) (backends.Info, error)

func (f proberFunc) Probe(ctx context.Context, spec backends.Spec) (backends.Info, error) {
	return f(ctx, spec)
}
