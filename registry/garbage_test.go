package registry

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const goodConfig = `{
  "version": 1,
  "providers": {
    "amp": {"extends": "acp", "label": "Amp", "command": ["amp-acp"], "env": {"K": "v"}},
    "gemini": {"enabled": false},
    "aider": {"cols": 100}
  }
}
`

// garbage returns an invalid providers document of one of several kinds:
// random bytes, a truncation of a good document, good JSON with a wrong
// type, an unknown field, a bad version, trailing data, deep nesting.
func garbage(rng *rand.Rand) []byte {
	switch rng.IntN(8) {
	case 0:
		b := make([]byte, rng.IntN(200))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	case 1:
		return []byte(goodConfig[:rng.IntN(len(goodConfig)-3)])
	case 2:
		return []byte(strings.Replace(goodConfig, `"enabled": false`, `"enabled": "no"`, 1))
	case 3:
		return []byte(strings.Replace(goodConfig, `"cols": 100`, `"colz": 100`, 1))
	case 4:
		return []byte(strings.Replace(goodConfig, `"version": 1`, `"version": 2`, 1))
	case 5:
		return []byte(goodConfig + `{"version": 1}`)
	case 6:
		n := 1 + rng.IntN(20000)
		return []byte(strings.Repeat("[", n) + strings.Repeat("]", rng.IntN(n+1)))
	default:
		const set = "{}[]\",:x\x00"
		b := []byte(goodConfig)
		for range 1 + rng.IntN(4) {
			b[rng.IntN(len(b))] = set[rng.IntN(len(set))]
		}
		return b
	}
}

// TestGarbageWritesKeepLastGoodConfig writes 1000 invalid files, through
// the watcher and through Reload, while another goroutine reads snapshots:
// no panic, every snapshot whole, the last good config always in force.
func TestGarbageWritesKeepLastGoodConfig(t *testing.T) {
	f := newFixture(t)
	f.install(t, "amp-acp")
	f.write(t, goodConfig)
	r := open(t, f.config())
	run(t, r)
	builtinIDs := make([]string, 0, 10)
	for _, d := range builtins("/x") {
		builtinIDs = append(builtinIDs, d.id)
	}
	check := func(s Snapshot) string {
		if !slices.IsSortedFunc(s.Providers, func(a, b ProviderStatus) int { return strings.Compare(a.ID, b.ID) }) {
			return "providers not sorted"
		}
		if len(s.Providers) != len(builtinIDs)+1 {
			return "wrong number of providers"
		}
		for _, id := range append(builtinIDs, "amp") {
			p, ok := s.Provider(id)
			if !ok || p.Label == "" || p.Status == "" || len(p.Command) == 0 {
				return "provider " + id + " missing or incomplete"
			}
		}
		if p, _ := s.Provider("amp"); p.Label != "Amp" || p.Status != StatusReady {
			return "amp is not the last good one"
		}
		if status(s, "gemini") != StatusDisabled {
			return "gemini is not disabled"
		}
		return ""
	}
	if msg := check(r.Snapshot()); msg != "" {
		t.Fatalf("good config: %s", msg)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readerErr string
	var reads int
	wg.Go(func() {
		last := int64(0)
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := r.Snapshot()
			reads++
			if s.Version < last {
				readerErr = "version went backwards"
				return
			}
			last = s.Version
			if msg := check(s); msg != "" {
				readerErr = msg
				return
			}
			time.Sleep(20 * time.Microsecond) // leave the other core to the writer
		}
	})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1000 {
		g := garbage(rng)
		for { // a random change inside a string can leave the file valid
			if _, err := parseDocument("g", g, builtins("/x")); err != nil {
				break
			}
			g = garbage(rng)
		}
		if i%2 == 0 {
			f.write(t, string(g))
		} else {
			f.renameOver(t, string(g))
		}
		if i%3 == 0 {
			if err := r.Reload(); err == nil {
				t.Fatalf("Reload() of garbage #%d error = nil", i)
			}
		}
	}
	close(stop)
	wg.Wait()
	if reads < 100 {
		t.Errorf("reader made only %d reads", reads)
	}
	if readerErr != "" {
		t.Fatalf("reader saw a bad snapshot after %d reads: %s", reads, readerErr)
	}
	_ = r.Reload()
	s := r.Snapshot()
	if msg := check(s); msg != "" || s.Diagnostic == "" {
		t.Fatalf("after the garbage: %s, diagnostic %q; want the last good config and a diagnostic", msg, s.Diagnostic)
	}
	_, ch, cancel := r.Subscribe()
	defer cancel()
	f.renameOver(t, strings.Replace(goodConfig, `"Amp"`, `"Amp 2"`, 1))
	waitUntil(t, r, ch, "the fix after the garbage", func(s Snapshot) bool {
		p, _ := s.Provider("amp")
		return s.Diagnostic == "" && p.Label == "Amp 2"
	})
}
