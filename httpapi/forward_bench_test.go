package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkForwardedPrompt measures POST /v1/sessions/{id}/prompt sent to
// the session's owner and the same sent to another host, which forwards
// it (both real servers on loopback TCP, the pool a fake that starts the
// turn at once). One op is one prompt of each; it reports the p50 of
// each in µs and the difference, what forwarding adds.
func BenchmarkForwardedPrompt(b *testing.B) {
	fpB := &fakePool{}
	promptRecorder(fpB)
	ce := newClusterEnv(b, refusingPool(b, "a"), fpB)
	ce.m.owners["s"] = "b"
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	owner := &Client{BaseURL: ce.b.ts.URL, Token: ce.b.token, HTTP: hc}
	forwarder := &Client{BaseURL: ce.a.ts.URL, Token: ce.a.token, HTTP: hc}
	ctx := context.Background()
	prompt := func(c *Client) time.Duration {
		start := time.Now()
		if _, err := c.Prompt(ctx, "s", "", "bench", false); err != nil {
			b.Fatalf("Prompt() through %s error = %v", c.BaseURL, err)
		}
		return time.Since(start)
	}
	prompt(owner) // warm the connections
	prompt(forwarder)
	direct := make([]time.Duration, 0, b.N)
	forwarded := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		direct = append(direct, prompt(owner))
		forwarded = append(forwarded, prompt(forwarder))
	}
	b.StopTimer()
	p50 := func(l []time.Duration) float64 {
		slices.Sort(l)
		return float64(l[len(l)/2].Nanoseconds()) / 1e3
	}
	d, f := p50(direct), p50(forwarded)
	b.ReportMetric(d, "owner-p50-µs")
	b.ReportMetric(f, "forwarded-p50-µs")
	b.ReportMetric(f-d, "extra-p50-µs")
}

// BenchmarkHostSignature measures what signing adds to one forward: the
// forwarder's signature of a request with a 1 KiB body (its SHA-256, a
// nonce, an HMAC) and the owner's check of it (parse, HMAC, the body's
// SHA-256, the nonce cache).
func BenchmarkHostSignature(b *testing.B) {
	keys := deriveHostKeys(clusterKey)
	body := make([]byte, 1<<10)
	var c nonceCache
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		rs := newRequestSignature(http.MethodPost, "/v1/sessions/s/prompt", sha256.Sum256(body), "b", "a", now)
		h := rs.header(keys.sign)
		got, mac, err := parseSignature(h, http.MethodPost, "/v1/sessions/s/prompt", "a")
		if err != nil || !hmac.Equal(mac, got.mac(keys.sign)) || sha256.Sum256(body) != got.body {
			b.Fatalf("signature does not check: %v", err)
		}
		if err := c.add(now.Unix(), got.at, got.nonce); err != nil {
			b.Fatal(err)
		}
	}
}
