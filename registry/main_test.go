package registry

import (
	"context"
	"github.com/agentpool/agentpool/backends/agenttest"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	agenttest.Dispatch() // the fake agents of the probe tests
	// signal.Notify starts one process-wide goroutine that never ends.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("os/signal.loop"))
}

// waitLimit bounds every wait for an event in these tests; reaching it is a
// failure, not a measurement.
const waitLimit = 10 * time.Second

// fixture is a providers file in a temporary directory with a PATH of fake
// programs and a home directory of its own.
type fixture struct {
	dir  string // holds providers.json
	bin  string // the PATH
	home string // Config.Home
	path string // providers.json
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{dir: filepath.Join(root, "conf"), bin: filepath.Join(root, "bin"), home: filepath.Join(root, "home")}
	f.path = filepath.Join(f.dir, "providers.json")
	for _, d := range []string{f.dir, f.bin, f.home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// install creates executable fake programs in the fixture's PATH.
func (f *fixture) install(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(f.bin, n), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// write replaces the file in place (truncate and write).
func (f *fixture) write(t testing.TB, content string) {
	t.Helper()
	if err := os.WriteFile(f.path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// renameOver writes a temporary file and renames it over the file, as
// sed -i and most editors do.
func (f *fixture) renameOver(t testing.TB, content string) {
	t.Helper()
	tmp := filepath.Join(f.dir, ".tmp-providers")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		t.Fatal(err)
	}
}

// config is a Config for the fixture, with quiet logs.
func (f *fixture) config() Config {
	return Config{
		Path:     f.path,
		PathEnv:  f.bin,
		Home:     f.home,
		SelfPath: filepath.Join(f.bin, "agentpool"),
		Logger:   slog.New(slog.DiscardHandler),
	}
}

// open returns a registry for cfg, closed when the test ends.
func open(t testing.TB, cfg Config) *Registry {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// run starts r.Run and waits until it watches; the test's end stops it
// and waits for it to return.
func run(t testing.TB, r *Registry) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() error = %v; want nil", err)
		}
	})
	select {
	case <-r.runStarted:
	case err := <-done:
		t.Fatalf("Run() returned early: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("Run did not start")
	}
}

// waitUntil waits, reading changes from ch, until r's snapshot satisfies
// cond, and returns that snapshot.
func waitUntil(t testing.TB, r *Registry, ch <-chan Change, what string, cond func(Snapshot) bool) Snapshot {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		if s := r.Snapshot(); cond(s) {
			return s
		}
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("waiting for %s: subscription closed", what)
			}
		case <-deadline:
			s := r.Snapshot()
			t.Fatalf("waiting for %s: not reached; snapshot version %d, diagnostic %q", what, s.Version, s.Diagnostic)
		}
	}
}

// status returns the status of provider id in s, or "absent".
func status(s Snapshot, id string) string {
	p, ok := s.Provider(id)
	if !ok {
		return "absent"
	}
	return p.Status
}

// noChange asserts that nothing arrives on ch for a few debounce periods.
func noChange(t testing.TB, ch <-chan Change, why string) {
	t.Helper()
	select {
	case c := <-ch:
		t.Errorf("%s: got change %+v; want none", why, c)
	case <-time.After(8 * DefaultDebounce):
	}
}
