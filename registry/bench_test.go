package registry

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkEditToChange measures, per edit of providers.json (alternately
// rename-over and write in place), the time until the change is applied and
// published, debounce included. It reports the p50 and p99 over b.N edits.
func BenchmarkEditToChange(b *testing.B) {
	f := newFixture(b)
	f.install(b, "agentpool")
	f.write(b, `{"version": 1}`)
	r := open(b, f.config())
	_, ch, cancel := r.Subscribe()
	defer cancel()
	run(b, r)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		want := fmt.Sprintf("EDIT=%d", i)
		content := fmt.Sprintf(`{"version": 1, "providers": {"demo": {"env": {"EDIT": "%d"}}}}`, i)
		start := time.Now()
		if i%2 == 0 {
			f.renameOver(b, content)
		} else {
			f.write(b, content)
		}
		for {
			spec, err := r.Resolve(ProviderDemo)
			if err == nil && slices.Contains(spec.Env, want) {
				break
			}
			select {
			case <-ch:
			case <-time.After(waitLimit):
				b.Fatalf("edit %d not applied", i)
			}
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	pct := func(p int) float64 {
		return float64(lat[min(len(lat)-1, len(lat)*p/100)]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(50), "p50-ms")
	b.ReportMetric(pct(99), "p99-ms")
}

// BenchmarkResolve measures Resolve of a ready provider with arguments,
// environment and permissions.
func BenchmarkResolve(b *testing.B) {
	f := newFixture(b)
	f.install(b, "gemini")
	f.write(b, `{"version": 1, "providers": {"gemini": {"permissions": {"edit": "ask", "read": "allow"}}}}`)
	r := open(b, f.config())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Resolve(ProviderGemini); err != nil {
			b.Fatal(err)
		}
	}
}
