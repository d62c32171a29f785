package registry

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestChanges(t *testing.T) {
	const (
		none = ""
		base = `{"version": 1, "providers": {
			"gemini": {"enabled": false},
			"amp": {"extends": "acp", "command": ["amp-acp"]},
			"codex": {"label": "Codex"}}}`
	)
	tests := []struct {
		name     string
		from, to string // file contents; none = no file
		want     Change
	}{
		{"file appears", none, base, Change{Added: []string{"amp"}, Disabled: []string{"gemini"}}},
		// A file that goes away keeps its config in force, with a diagnostic.
		{"file removed", base, none, Change{Diagnostic: "providers.json is missing"}},
		{"enable", base, `{"version": 1, "providers": {"gemini": {"enabled": true}, "amp": {"extends": "acp", "command": ["amp-acp"]}, "codex": {"label": "Codex"}}}`,
			Change{Enabled: []string{"gemini"}}},
		{"spec change", base, `{"version": 1, "providers": {"gemini": {"enabled": false}, "amp": {"extends": "acp", "command": ["amp-acp", "-v"]}, "codex": {"label": "Codex", "turn_timeout": "1m"}}}`,
			Change{SpecChanged: []string{"amp", "codex"}}},
		{"label only", base, `{"version": 1, "providers": {"gemini": {"enabled": false}, "amp": {"extends": "acp", "command": ["amp-acp"]}, "codex": {"label": "OpenAI Codex"}}}`,
			Change{Updated: []string{"codex"}}},
		{"rename", base, `{"version": 1, "providers": {"gemini": {"enabled": false}, "amp2": {"extends": "acp", "command": ["amp-acp"]}, "codex": {"label": "Codex"}}}`,
			Change{Added: []string{"amp2"}, Removed: []string{"amp"}}},
		{"formatting only", base, base + "\n\n", Change{}},
		{"bad file", base, `{"version": 1, "providers": {"gemini": {"enabled": true, "x": 1}}}`,
			Change{Diagnostic: "providers.gemini.x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			set := func(content string) {
				if content == none {
					_ = os.Remove(f.path)
					return
				}
				f.write(t, content)
			}
			set(tt.from)
			r := open(t, f.config())
			before, ch, cancel := r.Subscribe()
			defer cancel()
			set(tt.to)
			_ = r.Reload()
			var got Change
			select {
			case got = <-ch:
			default:
				t.Fatalf("no change from %q to %q", tt.from, tt.to)
			}
			if got.Version != before.Version+1 || r.Snapshot().Version != got.Version {
				t.Errorf("change version = %d, snapshot %d; want %d", got.Version, r.Snapshot().Version, before.Version+1)
			}
			diag := got.Diagnostic
			got.Version, got.Diagnostic = 0, ""
			wantDiag := tt.want.Diagnostic
			tt.want.Diagnostic = ""
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("change mismatch (-want +got):\n%s", diff)
			}
			if (wantDiag == "") != (diag == "") || !strings.Contains(diag, wantDiag) {
				t.Errorf("change diagnostic = %q; want one mentioning %q", diag, wantDiag)
			}
		})
	}
}

func TestReloadWithoutChangeKeepsVersion(t *testing.T) {
	f := newFixture(t)
	f.write(t, `{"version": 1}`)
	r := open(t, f.config())
	_, ch, cancel := r.Subscribe()
	defer cancel()
	v := r.Snapshot().Version
	for range 3 {
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Snapshot().Version; got != v || len(ch) != 0 {
		t.Errorf("after identical reloads version = %d with %d changes; want %d and none", got, len(ch), v)
	}
}

func TestSlowSubscriberIsDropped(t *testing.T) {
	f := newFixture(t)
	r := open(t, f.config())
	_, slow, cancelSlow := r.Subscribe()
	defer cancelSlow()
	_, fast, cancelFast := r.Subscribe()
	defer cancelFast()
	got := 0
	for i := range 3 * subscriberBuffer {
		f.write(t, fmt.Sprintf(`{"version": 1, "providers": {"codex": {"label": "v%d"}}}`, i))
		if err := r.Reload(); err != nil { // never blocks on the slow one
			t.Fatal(err)
		}
		<-fast
		got++
	}
	n := 0
	for range slow {
		n++
	}
	if n != subscriberBuffer || got != 3*subscriberBuffer {
		t.Errorf("slow subscriber got %d changes before being dropped, fast %d; want %d and %d", n, got, subscriberBuffer, 3*subscriberBuffer)
	}
	cancelSlow() // after the drop: harmless
	cancelSlow()
}

func TestCloseEndsSubscriptions(t *testing.T) {
	f := newFixture(t)
	r := open(t, f.config())
	_, ch, cancel := r.Subscribe()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch; ok {
		t.Error("subscription open after Close")
	}
	cancel()
	if _, ch2, _ := r.Subscribe(); ch2 != nil {
		if _, ok := <-ch2; ok {
			t.Error("Subscribe after Close returned an open channel")
		}
	}
	if err := r.Reload(); err != ErrClosed {
		t.Errorf("Reload() after Close error = %v; want ErrClosed", err)
	}
}
