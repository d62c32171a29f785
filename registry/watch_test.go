package registry

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

const (
	geminiOn  = `{"version": 1, "providers": {"gemini": {"enabled": true}}}`
	geminiOff = `{"version": 1, "providers": {"gemini": {"enabled": false}}}`
)

func geminiIs(want string) func(Snapshot) bool {
	return func(s Snapshot) bool { return status(s, "gemini") == want && s.Diagnostic == "" }
}

// k8sLayout builds a Kubernetes ConfigMap volume: providers.json ->
// ..data/providers.json, ..data -> ..<stamp>/.
func k8sLayout(t *testing.T, f *fixture, stamp, content string) {
	t.Helper()
	dir := filepath.Join(f.dir, "..stamp_"+stamp)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "providers.json"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(f.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(dir), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(f.path); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", "providers.json"), f.path); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHotReloadEditorPatterns(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, f *fixture)
		edit  func(t *testing.T, f *fixture)
		want  func(Snapshot) bool
	}{
		{"create", func(t *testing.T, f *fixture) {}, func(t *testing.T, f *fixture) { f.write(t, geminiOff) },
			geminiIs(StatusDisabled)},
		{"write in place", func(t *testing.T, f *fixture) { f.write(t, geminiOn) },
			func(t *testing.T, f *fixture) { f.write(t, geminiOff) }, geminiIs(StatusDisabled)},
		{"rename over (sed -i)", func(t *testing.T, f *fixture) { f.write(t, geminiOn) },
			func(t *testing.T, f *fixture) { f.renameOver(t, geminiOff) }, geminiIs(StatusDisabled)},
		{"vim (backup, write new, delete backup)", func(t *testing.T, f *fixture) { f.write(t, geminiOn) },
			func(t *testing.T, f *fixture) {
				backup := f.path + "~"
				if err := os.Rename(f.path, backup); err != nil {
					t.Fatal(err)
				}
				f.write(t, geminiOff)
				if err := os.Remove(backup); err != nil {
					t.Fatal(err)
				}
			}, geminiIs(StatusDisabled)},
		{"remove", func(t *testing.T, f *fixture) { f.write(t, geminiOff) },
			func(t *testing.T, f *fixture) {
				if err := os.Remove(f.path); err != nil {
					t.Fatal(err)
				}
			}, func(s Snapshot) bool { // the last good config stays
				return status(s, "gemini") == StatusDisabled && s.ETag == `"absent"` && strings.Contains(s.Diagnostic, "is missing")
			}},
		{"kubernetes symlink swap", func(t *testing.T, f *fixture) { k8sLayout(t, f, "1", geminiOn) },
			func(t *testing.T, f *fixture) {
				k8sLayout(t, f, "2", geminiOff)
				if err := os.RemoveAll(filepath.Join(f.dir, "..stamp_1")); err != nil {
					t.Fatal(err)
				}
			}, geminiIs(StatusDisabled)},
		{"symlink into another directory", func(t *testing.T, f *fixture) {
			target := filepath.Join(filepath.Dir(f.dir), "dotfiles", "providers.json")
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, []byte(geminiOn), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, f.path); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, f *fixture) {
			target := filepath.Join(filepath.Dir(f.dir), "dotfiles", "providers.json")
			if err := os.WriteFile(target, []byte(geminiOff), 0o644); err != nil {
				t.Fatal(err)
			}
		}, geminiIs(StatusDisabled)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.install(t, "gemini")
			tt.setup(t, f)
			r := open(t, f.config())
			if tt.want(r.Snapshot()) {
				t.Fatal("the wanted state holds before the edit")
			}
			_, ch, cancel := r.Subscribe()
			defer cancel()
			run(t, r)
			tt.edit(t, f)
			waitUntil(t, r, ch, tt.name, tt.want)
		})
	}
}

func TestHotReloadChmodAndIdenticalBytes(t *testing.T) {
	f := newFixture(t)
	f.install(t, "gemini")
	f.write(t, geminiOn)
	r := open(t, f.config())
	_, ch, cancel := r.Subscribe()
	defer cancel()
	run(t, r)
	if err := os.Chmod(f.path, 0o600); err != nil {
		t.Fatal(err)
	}
	noChange(t, ch, "chmod")
	f.write(t, geminiOn)
	noChange(t, ch, "rewriting identical bytes")
	if os.Geteuid() != 0 { // root reads any file
		if err := os.Chmod(f.path, 0); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, r, ch, "an unreadable file", func(s Snapshot) bool {
			return strings.Contains(s.Diagnostic, "permission denied") && status(s, "gemini") == StatusReady
		})
		if err := os.Chmod(f.path, 0o644); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, r, ch, "a readable file again", geminiIs(StatusReady))
	}
	f.write(t, geminiOff)
	waitUntil(t, r, ch, "an edit after chmod", geminiIs(StatusDisabled))
}

func TestHotReloadEnableDisableEnable(t *testing.T) {
	f := newFixture(t)
	f.install(t, "gemini")
	r := open(t, f.config())
	_, ch, cancel := r.Subscribe()
	defer cancel()
	run(t, r)
	for i, step := range []struct {
		content, want string
	}{{geminiOn, StatusReady}, {geminiOff, StatusDisabled}, {geminiOn, StatusReady}, {geminiOff, StatusDisabled}} {
		f.renameOver(t, step.content)
		waitUntil(t, r, ch, fmt.Sprintf("step %d: gemini %s", i, step.want), geminiIs(step.want))
		if _, err := r.Resolve("gemini"); (err == nil) != (step.want == StatusReady) {
			t.Errorf("step %d: Resolve(gemini) error = %v with status %s", i, err, step.want)
		}
	}
}

func TestHotReloadBadEditThenFix(t *testing.T) {
	f := newFixture(t)
	f.install(t, "amp-acp", "gemini")
	good := `{"version": 1, "providers": {"amp": {"extends": "acp", "command": ["amp-acp"]}, "gemini": {"enabled": false}}}`
	f.write(t, good)
	r := open(t, f.config())
	_, ch, cancel := r.Subscribe()
	defer cancel()
	run(t, r)
	goodETag := r.Snapshot().ETag

	f.write(t, "{\n  \"version\": 1,\n  \"providers\": {\"gemini\": {\"enabeld\": true}}\n}\n")
	s := waitUntil(t, r, ch, "the diagnostic", func(s Snapshot) bool { return s.Diagnostic != "" })
	if !strings.Contains(s.Diagnostic, f.path+":3:28: providers.gemini.enabeld: unknown field") {
		t.Errorf("diagnostic = %q; want file:3:28 and the path", s.Diagnostic)
	}
	if status(s, "amp") != StatusReady || status(s, "gemini") != StatusDisabled || s.ETag == goodETag {
		t.Errorf("with a bad file: amp %s, gemini %s, etag changed %v; want the last good config and the bad file's etag",
			status(s, "amp"), status(s, "gemini"), s.ETag != goodETag)
	}
	if _, err := r.Resolve("amp"); err != nil {
		t.Errorf("Resolve(amp) with a bad file error = %v; want the last good spec", err)
	}

	f.write(t, `{"version": 1, "providers": {"amp": {"extends": "acp", "command": ["amp-acp"]}}}`)
	waitUntil(t, r, ch, "the fix", func(s Snapshot) bool {
		return s.Diagnostic == "" && status(s, "gemini") == StatusReady && status(s, "amp") == StatusReady
	})
}

func TestHotReloadDirectoryCreatedLater(t *testing.T) {
	f := newFixture(t)
	f.install(t, "gemini")
	cfg := f.config()
	cfg.Path = filepath.Join(f.dir, "later", "providers.json")
	cfg.PollInterval = 20 * time.Millisecond
	r := open(t, cfg)
	_, ch, cancel := r.Subscribe()
	defer cancel()
	run(t, r) // cannot watch a missing directory: polls
	if err := os.Mkdir(filepath.Dir(cfg.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Path, []byte(geminiOff), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, r, ch, "the file in a new directory", geminiIs(StatusDisabled))
	// Edits keep being seen (by the watch, once the directory exists).
	if err := os.WriteFile(cfg.Path, []byte(geminiOn), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, r, ch, "an edit once watched", geminiIs(StatusReady))
}

func TestPollingFallback(t *testing.T) {
	f := newFixture(t)
	f.install(t, "gemini")
	synctest.Test(t, func(t *testing.T) {
		cfg := f.config()
		cfg.ForcePolling = true
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		// Edits happen half-way between polls.
		time.Sleep(cfg.PollInterval / 2)
		synctest.Wait()

		for i, step := range []struct{ content, want string }{
			{geminiOff, StatusDisabled}, {geminiOn, StatusReady}, {"", StatusReady},
		} {
			if step.content == "" {
				if err := os.Remove(f.path); err != nil {
					t.Fatal(err)
				}
			} else {
				f.renameOver(t, step.content)
			}
			time.Sleep(DefaultPollInterval)
			synctest.Wait()
			if got := status(r.Snapshot(), "gemini"); got != step.want {
				t.Errorf("step %d: gemini is %s one poll after the edit; want %s", i, got, step.want)
			}
		}
		v := r.Snapshot().Version
		time.Sleep(10 * DefaultPollInterval)
		synctest.Wait()
		if got := r.Snapshot().Version; got != v {
			t.Errorf("polling an unchanged file moved the version from %d to %d", v, got)
		}
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run() error = %v", err)
		}
	})
}

func TestSIGHUPReloadsAndLooksUpAgain(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.SIGHUP = true
	cfg.ForcePolling = true
	cfg.PollInterval = time.Hour // only SIGHUP can reload
	r := open(t, cfg)
	_, ch, cancel := r.Subscribe()
	defer cancel()
	run(t, r)
	f.install(t, "codex-acp")
	f.write(t, `{"version": 1, "providers": {"codex": {"label": "C"}}}`)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, r, ch, "a reload on SIGHUP", func(s Snapshot) bool {
		p, _ := s.Provider("codex")
		return p.Label == "C" && p.Status == StatusReady
	})
}

func TestRunTwiceAndAfterClose(t *testing.T) {
	f := newFixture(t)
	r := open(t, f.config())
	run(t, r)
	if err := r.Run(context.Background()); err == nil {
		t.Error("second concurrent Run() error = nil; want an error")
	}
	r2 := open(t, f.config())
	_ = r2.Close()
	if err := r2.Run(context.Background()); err != ErrClosed {
		t.Errorf("Run() after Close error = %v; want ErrClosed", err)
	}
}

func TestDebouncer(t *testing.T) {
	const d = 25 * time.Millisecond
	ms := time.Millisecond
	tests := []struct {
		name  string
		kicks []time.Duration // offsets from the start
		fire  time.Duration   // when it fires first
	}{
		{"one event", []time.Duration{0}, d},
		{"a burst", []time.Duration{0, 5 * ms, 20 * ms}, 20*ms + d},
		{"a pause", []time.Duration{0, 40 * ms}, d},
		{"a stream is capped", []time.Duration{0, 20 * ms, 40 * ms, 60 * ms, 80 * ms, 100 * ms, 120 * ms}, 4 * d},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newDebouncer(d, 4*d)
				defer b.stop()
				start := time.Now()
				fired := time.Duration(-1)
				for _, k := range tt.kicks {
					select {
					case <-b.c():
						b.fired()
						if fired < 0 {
							fired = time.Since(start)
						}
					case <-time.After(k - time.Since(start)):
					}
					b.kick()
				}
				if fired < 0 {
					<-b.c()
					fired = time.Since(start)
				}
				if fired != tt.fire {
					t.Errorf("debouncer fired first at %v; want %v", fired, tt.fire)
				}
			})
		})
	}
}

func TestHotReloadDirectoryRemovedAndRecreated(t *testing.T) {
	f := newFixture(t)
	f.install(t, "gemini")
	f.write(t, geminiOff)
	cfg := f.config()
	cfg.PollInterval = 20 * time.Millisecond
	r := open(t, cfg)
	_, ch, cancel := r.Subscribe()
	defer cancel()
	run(t, r)
	if err := os.RemoveAll(f.dir); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, r, ch, "the last good config, and a diagnostic, after the directory went", func(s Snapshot) bool {
		return s.ETag == `"absent"` && status(s, "gemini") == StatusDisabled && strings.Contains(s.Diagnostic, "is missing")
	})
	if err := os.Mkdir(f.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f.write(t, geminiOff)
	waitUntil(t, r, ch, "the file in the recreated directory", geminiIs(StatusDisabled))
	f.renameOver(t, geminiOn)
	waitUntil(t, r, ch, "an edit in the recreated directory", geminiIs(StatusReady))
}
